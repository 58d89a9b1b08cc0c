"""Grow a real trace along its timeline: its events written TIMES over, each copy shifted past the one before (its
timestamps, correlation and flow ids, External ids and ProfilerStep numbers), as if the profiler had recorded that
many more steps of the same training. For benchmarks at the size of big real traces, with real kernel names,
args and layout (a generated trace, make_trace.py, is regular where real ones are not). One seam: what the trace
holds before its first step (the profiler's start) lies between one copy's last step and the next copy's first,
whose device time begins where the last step's ended, so the first step of each later copy is that much longer
(transformer_bf16: 31.8 ms, not 19.9 ms).

Usage: python benchmarks/grow_trace.py SRC OUT.json.gz [--times 88] [--layout line|torch2.13]
e.g. tests/data/traces/h200/transformer_bf16.pt.trace.json.gz grown 88 times: 4.48M events, 1.4 GB of JSON.
The events keep their keys and order, written with Kineto's separators, so the copies read as the original does:
one event a line, or (--layout torch2.13) as torch 2.13 writes them, each key on a line of its own and the comma
before "args" on a line of its own.
"""
from __future__ import annotations

import argparse
import gzip
import json
import re
from pathlib import Path

STEP = re.compile(r"ProfilerStep#(\d+)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("src", type=Path)
    parser.add_argument("out", type=Path)
    parser.add_argument("--times", type=int, default=88)
    parser.add_argument("--layout", choices=sorted(LAYOUTS), default="line")
    args = parser.parse_args()
    raw = args.src.read_bytes()
    data = json.loads(gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw)
    events = data.pop("traceEvents")
    shifts = _shifts(events)
    opener = gzip.open if args.out.name.endswith(".gz") else open
    count = 0
    with opener(args.out, "wt", **({"compresslevel": 1} if opener is gzip.open else {})) as out:
        head = json.dumps({k: v for k, v in data.items() if k != "traceName"})
        out.write(head[:-1] + ', "traceEvents": [\n')
        for copy in range(args.times):
            lines = [LAYOUTS[args.layout](_shifted(e, copy, shifts)) for e in events
                     if copy == 0 or e.get("ph") != "M"]
            out.write((",\n" if copy else "") + ",\n".join(lines))
            count += len(lines)
        out.write('\n], "traceName": ' + json.dumps(data.get("traceName", "")) + "}\n")
    print(json.dumps({"out": str(args.out), "events": count, "times": args.times}))


def _key_per_line(event: dict) -> str:
    """An event as torch 2.13 writes it: a key a line, "args" after a comma on a line of its own."""
    members = ",\n".join(f"    {json.dumps(k)}: {json.dumps(v)}" for k, v in event.items() if k != "args")
    args = ('\n    ,\n    "args": {\n      ' + json.dumps(event["args"])[1:-1] + "\n    }") if "args" in event else ""
    return "  {\n" + members + args + "\n  }"


LAYOUTS = {"line": json.dumps, "torch2.13": _key_per_line}


def _shifts(events: list) -> dict:
    """How far each copy moves: past the trace's last end in time, past its largest ids and step number."""
    timed = [e for e in events if isinstance(e.get("ts"), (int, float))]
    start = min(e["ts"] for e in timed)
    end = max(e["ts"] + (e.get("dur") or 0) for e in timed)
    steps = [int(m.group(1)) for e in events if (m := STEP.fullmatch(str(e.get("name", ""))))]

    def largest(values) -> int:
        return max((v for v in values if isinstance(v, int) and not isinstance(v, bool)), default=0) + 1

    return {"ts": (end - start) * 1.001, "step": max(steps, default=0) + 1,
            "correlation": largest((e.get("args") or {}).get("correlation") for e in events),
            "External id": largest((e.get("args") or {}).get("External id") for e in events),
            "id": largest(e.get("id") for e in events)}


def _shifted(event: dict, copy: int, shifts: dict) -> dict:
    if not copy:
        return event
    event = dict(event)
    if isinstance(event.get("ts"), (int, float)):
        event["ts"] = round(event["ts"] + copy * shifts["ts"], 3)
    if isinstance(event.get("id"), int):
        event["id"] += copy * shifts["id"]
    step = STEP.fullmatch(str(event.get("name", "")))
    if step:
        event["name"] = f"ProfilerStep#{int(step.group(1)) + copy * shifts['step']}"
    args = event.get("args")
    if isinstance(args, dict):
        args = dict(args)
        for key in ("correlation", "External id"):
            if isinstance(args.get(key), int) and args[key] > 0:
                args[key] += copy * shifts[key]
        event["args"] = args
    return event


if __name__ == "__main__":
    main()
