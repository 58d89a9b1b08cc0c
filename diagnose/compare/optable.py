"""Per-step time of each CPU op (self time, by name and input shapes when recorded) and each GPU kernel, copy or
memset (by name), read from a trace: what `diagnose compare` matches between A and B. The trace's columns come from
the trace package (read_op_columns: streamed, compact, the window of steps its analysis chose past `--max-events`)."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

import numpy as np

from diagnose.analysis.metric_values import trace_gpu_name
from diagnose.trace import (
    MAX_EVENTS,
    NO_CORRELATION,
    PIECE_BYTES,
    OpColumns,
    read_op_columns,
    released,
    span_self_times,
)


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


def trace_profile(path: Path, steps_analysed: int, max_events: int = MAX_EVENTS,
                  piece_bytes: int = PIECE_BYTES) -> TraceProfile:
    """Per ProfilerStep when the trace has them: host ops inside the steps, device work from the first step's start
    on (the device runs a GPU-bound step's kernels after the host has marked its end); else over the whole trace
    per analysed step."""
    table = read_op_columns(path, max_events, piece_bytes)
    return released(profile_of(table, steps_analysed))  # the columns and pieces, before the other side is read


def profile_of(table: OpColumns, steps_analysed: int) -> TraceProfile:
    """The table per step; the columns are given up as it is made (one kind's arrays held at a time)."""
    marks = [] if table.kept is not None and table.kept.by_time else table.marks  # its markers were dropped
    span = (min(s for s, _ in marks), max(s + d for s, d in marks)) if marks else None
    steps = len(marks) if marks else max(steps_analysed, 1)
    device = table.device.joined()
    if span:
        device = _taken(device, np.flatnonzero(_launched_within(device, table.launches.joined(), *span)))
    kernel_times = _summed(device["name"], device["duration"], list(table.device_names))
    del device
    ops = table.ops.joined()
    if span:
        ops = _taken(ops, np.flatnonzero((span[0] <= ops["start"]) & (ops["start"] < span[1])))
    op_times = _self_times(ops, list(table.op_keys))
    return TraceProfile(_per_step(op_times, steps), _per_step(kernel_times, steps),
                        trace_gpu_name(table.metadata) or "", _world_size(table.metadata), steps)


def _taken(columns: dict[str, np.ndarray], index: np.ndarray) -> dict[str, np.ndarray]:
    return {name: column[index] for name, column in columns.items()}


def _launched_within(device: dict, launches: dict, start: float, end: float) -> np.ndarray:
    """Device work the host launched inside the steps (by correlation id): a GPU-bound step's kernels run after
    the host marked its end, and those of the step after the window must not count. Without correlation ids,
    the device work that starts inside the steps' span."""
    inside = (start <= launches["start"]) & (launches["start"] < end)
    launched = np.unique(launches["correlation"][inside])
    launched = launched[launched != NO_CORRELATION]
    if not len(launched):
        return (start <= device["start"]) & (device["start"] < end)
    return np.isin(device["correlation"], launched)


def _self_times(ops: dict[str, np.ndarray], keys: list[tuple[str, str]]) -> dict[tuple[str, str], tuple]:
    """Self time by op key, by the analysis's own rule (ops.span_self_times: a child takes from its parent only the
    part inside it). Summed in the ops' order: threads as they first appear, a thread's ops by start, the longer
    first on a tie."""
    order = _by_thread_then_start(ops)
    starts, durations, threads = ops.pop("start"), ops.pop("duration"), ops.pop("thread")
    selfs, _ = span_self_times(starts, starts + durations, threads, np.zeros(threads.max(initial=-1) + 1, dtype=bool))
    return _summed(ops.pop("key")[order], selfs[order], keys)


def _by_thread_then_start(ops: dict[str, np.ndarray]) -> np.ndarray:
    """The ops' order: threads as they first appear, then by start, the longer first on a tie (stable)."""
    threads = ops["thread"]
    codes, first = np.unique(threads, return_index=True)
    rank = np.empty(len(codes) and int(codes.max()) + 1, dtype=np.int64)
    rank[codes[np.argsort(first)]] = np.arange(len(codes))
    return np.lexsort((-ops["duration"], ops["start"], rank[threads] if len(threads) else threads))


def _summed(codes: np.ndarray, durations_us: np.ndarray, names: list) -> dict:
    """(seconds, count) by name, names in the order they first come; each sum in that order too."""
    if not len(codes):
        return {}
    seconds = np.bincount(codes, weights=durations_us / 1e6)
    counts = np.bincount(codes)
    present, first = np.unique(codes, return_index=True)
    return {names[code]: (float(seconds[code]), int(counts[code])) for code in present[np.argsort(first)].tolist()}


def _per_step(totals: dict, steps: int) -> dict:
    return {key: Amount(seconds / steps, calls / steps) for key, (seconds, calls) in totals.items()}


def _world_size(metadata: dict) -> Optional[int]:
    info = metadata.get("distributedInfo")
    size = info.get("world_size") if isinstance(info, dict) else None
    return int(size) if isinstance(size, (int, float)) else None
