"""Per-step time of each CPU op (self time, by name and input shapes when recorded) and each GPU kernel, copy or
memset (by name), read from a trace: what `diagnose compare` matches between A and B."""
from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

import orjson

from diagnose.analysis.classify import CPU_OP, KERNEL, MEMCPY, MEMSET, RUNTIME
from diagnose.analysis.metric_values import trace_gpu_name
from diagnose.analysis.trace_file import read_events

DEVICE_KINDS = KERNEL | MEMCPY | MEMSET
HOST_MARK_KINDS = CPU_OP | {"user_annotation"}  # where ProfilerStep# sits on the host, old traces and new


@dataclass(frozen=True)
class Amount:
    seconds: float  # per step
    calls: float  # per step


@dataclass(frozen=True)
class TraceProfile:
    ops: dict[tuple[str, str], Amount] = field(default_factory=dict)  # (name, input shapes or "") -> per step
    kernels: dict[str, Amount] = field(default_factory=dict)
    device: str = ""  # the GPU's name from deviceProperties, "" when the trace has none
    world_size: Optional[int] = None
    steps: int = 0


def trace_profile(path: Path, steps_analysed: int) -> TraceProfile:
    """Per ProfilerStep when the trace has them: host ops inside the steps, device work from the first step's start
    on (the device runs a GPU-bound step's kernels after the host has marked its end); else over the whole trace
    per analysed step."""
    data = read_events(path)
    events = [e for e in data["traceEvents"] if isinstance(e, dict) and e.get("ph") == "X" and "dur" in e]
    by_kind: dict[str, list[dict]] = defaultdict(list)
    for event in events:
        by_kind[str(event.get("cat", "")).lower()].append(event)
    cpu = [e for kind in CPU_OP for e in by_kind.get(kind, ()) if not _is_step_mark(e)]
    device = [e for kind in DEVICE_KINDS for e in by_kind.get(kind, ())]
    window = _step_window([e for kind in HOST_MARK_KINDS for e in by_kind.get(kind, ())])
    steps = max(steps_analysed, 1)
    if window:
        start, end, steps = window
        cpu = [e for e in cpu if start <= e["ts"] < end]
        runtime = [e for kind in RUNTIME for e in by_kind.get(kind, ())]
        device = _launched_within(device, runtime, start, end)
    return TraceProfile(_per_step(_self_times(cpu), steps), _per_step(_totals(device), steps),
                        trace_gpu_name(data) or "", _world_size(data), steps)


def _launched_within(device: list[dict], runtime: list[dict], start: float, end: float) -> list[dict]:
    """Device work the host launched inside the steps (by correlation id): a GPU-bound step's kernels run after
    the host marked its end, and those of the step after the window must not count. Without correlation ids,
    the device work that starts inside the steps' span."""
    launched = {_correlation(e) for e in runtime if start <= e["ts"] < end} - {None}
    if not launched:
        return [e for e in device if start <= e["ts"] < end]
    return [e for e in device if _correlation(e) in launched]


def _correlation(event: dict) -> Optional[int]:
    return (event.get("args") or {}).get("correlation")


def _step_window(host_events: list[dict]) -> Optional[tuple[float, float, int]]:
    """The host's ProfilerStep marks (newer traces mark each step on the GPU too: gpu_user_annotation)."""
    marks = [e for e in host_events if _is_step_mark(e)]
    if not marks:
        return None
    return (min(e["ts"] for e in marks), max(e["ts"] + e["dur"] for e in marks), len(marks))


def _is_step_mark(event: dict) -> bool:
    return str(event.get("name", "")).startswith("ProfilerStep#")  # an op in old traces: it would hold all the time


def _shapes(event: dict) -> str:
    dims = (event.get("args") or {}).get("Input Dims")
    return orjson.dumps(dims).decode() if dims else ""


def _self_times(ops: list[dict]) -> dict[tuple[str, str], list[float]]:
    """Self time: an op's duration less its direct children's on the same thread (ops nest, never overlap)."""
    threads: dict[tuple, list[dict]] = defaultdict(list)
    for op in ops:
        threads[(op.get("pid"), op.get("tid"))].append(op)
    totals: dict[tuple[str, str], list[float]] = defaultdict(lambda: [0.0, 0])
    for thread_ops in threads.values():
        thread_ops.sort(key=lambda e: (e["ts"], -e["dur"]))
        selfs = [float(e["dur"]) for e in thread_ops]
        stack: list[int] = []
        for i, op in enumerate(thread_ops):
            while stack and thread_ops[stack[-1]]["ts"] + thread_ops[stack[-1]]["dur"] <= op["ts"]:
                stack.pop()
            if stack:
                selfs[stack[-1]] -= op["dur"]
            stack.append(i)
        for op, self_us in zip(thread_ops, selfs):
            entry = totals[(str(op.get("name", "")), _shapes(op))]
            entry[0] += max(self_us, 0.0) / 1e6
            entry[1] += 1
    return totals


def _totals(events: list[dict]) -> dict[str, list[float]]:
    totals: dict[str, list[float]] = defaultdict(lambda: [0.0, 0])
    for event in events:
        entry = totals[str(event.get("name", ""))]
        entry[0] += float(event["dur"]) / 1e6
        entry[1] += 1
    return totals


def _per_step(totals: dict, steps: int) -> dict:
    return {key: Amount(seconds / steps, calls / steps) for key, (seconds, calls) in totals.items()}


def _world_size(data: dict) -> Optional[int]:
    info = data.get("distributedInfo")
    size = info.get("world_size") if isinstance(info, dict) else None
    return int(size) if isinstance(size, (int, float)) else None
