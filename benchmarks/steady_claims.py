"""Does a verified claim hold at steady state? The run's verified change, applied with `diagnose apply`, timed in
plain whole runs against the script as it was.

    python benchmarks/steady_claims.py [--budget-seconds 120] [--pairs 2] [--warmup-steps 30] [--timed-steps 240]
                                       [--record] SCRIPT [SCRIPT_ARGS...]

Copies SCRIPT into a temporary folder, runs `diagnose run` on the copy, applies the change it verified
(`diagnose apply`, which edits the copy), then times the original and the changed copy plainly
(benchmarks/time_plain.py: no profiler, no diagnose; --warmup-steps, then --timed-steps steps that span the epochs'
start-ups as a long run does), interleaved, --pairs times each. Prints the claim (the combined change's speedup,
its 99% interval, what its windows held) against the plain ratio of medians, and whether it lies within 20%.
With --record, appends a row to benchmarks/results/steady_claims.jsonl (benchmarks/README.md's table).
"""
from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from machine import commit, machine

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results" / "steady_claims.jsonl"
WITHIN = 0.2


def diagnose(folder: Path, script: str, args: list[str], budget_s: float) -> dict:
    command = [sys.executable, "-m", "diagnose", "run", "--budget-seconds", f"{budget_s:g}", "--out", "run", script,
               *args]
    done = subprocess.run(command, cwd=folder, capture_output=True, text=True, timeout=budget_s * 4 + 600)
    if done.returncode != 0:
        raise SystemExit(f"diagnose run exited {done.returncode}: {done.stderr[-2000:]}")
    return json.loads((folder / "run" / "diagnosis.json").read_text())


def plain_step_s(folder: Path, script: str, args: list[str], warmup: int, steps: int) -> float:
    command = [sys.executable, str(ROOT / "benchmarks" / "time_plain.py"), "--warmup-steps", str(warmup),
               "--timed-steps", str(steps), script, *args]
    done = subprocess.run(command, cwd=folder, capture_output=True, text=True, timeout=1800)
    line = next((w for w in done.stdout.split() if w.startswith("plain_step_s=")), None)
    if line is None:
        raise SystemExit(f"time_plain.py printed no step time: {done.stderr[-2000:]}")
    return float(line.split("=", 1)[1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("script")
    parser.add_argument("script_args", nargs=argparse.REMAINDER)
    parser.add_argument("--budget-seconds", type=float, default=120.0)
    parser.add_argument("--pairs", type=int, default=2)
    parser.add_argument("--warmup-steps", type=int, default=30)
    parser.add_argument("--timed-steps", type=int, default=240)
    parser.add_argument("--record", action="store_true", help=f"append a row to {RESULTS.name}")
    args = parser.parse_args()
    source = Path(args.script).resolve()
    with tempfile.TemporaryDirectory(prefix="steady-claims-") as tmp:
        folder = Path(tmp)
        shutil.copy(source, folder / source.name)
        shutil.copy(source, folder / f"before_{source.name}")
        found = diagnose(folder, source.name, args.script_args, args.budget_seconds)
        combined = next((e for e in found["experiments"] if e["optimization"] == "combined"
                         and e["verdict"] == "faster"), None)
        if combined is None:
            said = ", ".join(f"{e['optimization']} {e['verdict']}" for e in found["experiments"])
            raise SystemExit(f"the run verified no change faster ({said}): nothing to hold against plain runs")
        applied = subprocess.run([sys.executable, "-m", "diagnose", "apply", "run"], cwd=folder, capture_output=True,
                                 text=True, timeout=120)
        if applied.returncode != 0:
            raise SystemExit(f"diagnose apply exited {applied.returncode}: {applied.stderr[-2000:]}")
        before, after = [], []
        for _ in range(args.pairs):
            before.append(plain_step_s(folder, f"before_{source.name}", args.script_args, args.warmup_steps,
                                       args.timed_steps))
            after.append(plain_step_s(folder, source.name, args.script_args, args.warmup_steps, args.timed_steps))
    plain = statistics.median(before) / statistics.median(after)
    claim, (low, high) = combined["speedup"], combined["ci"]
    held = abs(claim / plain - 1) <= WITHIN
    timed_over = combined.get("timed_over") or "steady-steps"
    print(f"{source.name} {' '.join(args.script_args)}")
    changes = ", ".join(c["id"] for c in combined.get("changes", []))
    print(f"  claim {claim:.2f}x [{low:.2f}-{high:.2f}] ({timed_over}): {changes}")
    print(f"  plain whole runs {plain:.2f}x (before {[round(b * 1000, 1) for b in before]} ms, after "
          f"{[round(a * 1000, 1) for a in after]} ms a step)")
    print(f"  claim / plain {claim / plain:.2f}: {'within' if held else 'NOT within'} {WITHIN:.0%}")
    if args.record:
        cells = {"script": f"{source.name} {' '.join(args.script_args)}".strip(),
                 "claim [99%]": f"{claim:.2f}x [{low:.2f}-{high:.2f}]", "windows held": timed_over,
                 "plain whole runs": f"{plain:.2f}x", "claim / plain": f"{claim / plain:.2f}",
                 f"within {WITHIN:.0%}": "yes" if held else "no"}
        command = (f"python benchmarks/steady_claims.py --budget-seconds {args.budget_seconds:g} --pairs {args.pairs}"
                   f" --timed-steps {args.timed_steps} --record SCRIPT ARGS")
        with RESULTS.open("a") as out:
            out.write(json.dumps({"commit": commit(), "date": time.strftime("%Y-%m-%d"), "machine": machine(),
                                  "command": command, "cells": cells}) + "\n")
    return 0 if held else 1


if __name__ == "__main__":
    sys.exit(main())
