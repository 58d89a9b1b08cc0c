"""Per-step time of each CPU op (self time, by name and input shapes when recorded) and each GPU kernel, copy or
memset (by name), read from a trace: what `diagnose compare` matches between A and B.

The trace is read as a stream, a piece of its text at a time (event_pieces.py: any layout JSON allows),
and only the few columns the table needs are kept, in compact arrays: a 1M-event trace held as parsed JSON takes
gigabytes. A trace past `--max-events` keeps only the window of steps its analysis chose (window.py)."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Optional

import numpy as np
import orjson

from diagnose.analysis.classify import CPU_OP, KERNEL, MEMCPY, MEMSET, RUNTIME, complete_events, correlation_id
from diagnose.analysis.event_pieces import PIECE_BYTES, EventPieces, NotEvents
from diagnose.analysis.inflate import ERRORS as INFLATE_ERRORS
from diagnose.analysis.metric_values import trace_gpu_name
from diagnose.analysis.ops import span_self_times
from diagnose.analysis.prefetch import MAX_EVENTS
from diagnose.analysis.release import released
from diagnose.analysis.trace_file import read_events, step_window
from diagnose.analysis.window import StepWindow

DEVICE_KINDS = KERNEL | MEMCPY | MEMSET
HOST_MARK_KINDS = CPU_OP | {"user_annotation"}  # where ProfilerStep# sits on the host, old traces and new
NO_CORRELATION = -1  # as classify.correlation_id gives it


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
    window = step_window(path, max_events)
    # a layout the pieces are not read in: the whole text, as the analysis then reads it
    table = _streamed(path, piece_bytes, window) or whole_text_columns(path)
    return released(table.profile(steps_analysed))  # the columns and pieces, before the other side is read


def whole_text_columns(path: Path) -> "OpColumns":
    """The table's columns from the trace parsed whole (every event: no window)."""
    data = read_events(path)
    table = OpColumns(None)
    table.add(data["traceEvents"])
    table.metadata = data
    return table


def _streamed(path: Path, piece_bytes: int, window: Optional[StepWindow]) -> Optional["OpColumns"]:
    """The table's columns read piece by piece (any layout); None when the file is not a whole trace."""
    table = OpColumns(window)
    pieces = EventPieces(path, piece_bytes)
    try:
        for events in pieces:
            table.add(events)
    except (*INFLATE_ERRORS, orjson.JSONDecodeError, NotEvents):
        return None
    table.metadata = pieces.metadata
    return table


class OpColumns:
    """What the table needs of each event, as arrays: host ops (start, duration, thread, name and shapes), the
    host's step marks, runtime launches (start, correlation id) and device work (start, duration, name,
    correlation id). With a window, only the events the window's analysis kept: memory bounded by its size."""

    def __init__(self, window: Optional[StepWindow]):
        self.window = window
        self.metadata: dict = {}
        self.threads: dict = {}
        self.op_keys: dict[tuple[str, str], int] = {}
        self.device_names: dict[str, int] = {}
        self.ops = _Columns(OP_COLUMNS)
        self.marks: list[tuple[float, float]] = []
        self.launches = _Columns(LAUNCH_COLUMNS)
        self.device = _Columns(DEVICE_COLUMNS)

    def add(self, events: Iterable) -> None:
        ops, launches, device = [], [], []
        for event, start, duration in complete_events(events):
            kind = str(event.get("cat", "")).lower()
            name = str(event.get("name", ""))
            if kind in HOST_MARK_KINDS and name.startswith("ProfilerStep#"):  # an op in old traces: not an op here
                if self._on_host(start):
                    self.marks.append((start, duration))
            elif kind in CPU_OP:
                if self._on_host(start):
                    ops.append((start, duration, self._code(self.threads, (event.get("pid"), event.get("tid"))),
                                self._code(self.op_keys, (name, _shapes(event)))))
            elif kind in RUNTIME:
                if self._on_host(start):
                    launches.append((start, correlation_id(event)))
            elif kind in DEVICE_KINDS:
                correlation = correlation_id(event)
                if self._on_device(start, duration, correlation):
                    device.append((start, duration, self._code(self.device_names, name), correlation))
        self.ops.append(ops)
        self.launches.append(launches)
        self.device.append(device)

    def _on_host(self, start: float) -> bool:
        window = self.window
        return window is None or window.keep_from <= start < window.keep_until  # the next step starts there

    def _on_device(self, start: float, duration: float, correlation: int) -> bool:
        window = self.window
        if window is None:
            return True
        if window.by_launch and window.corr_low <= correlation <= window.corr_high:
            return True
        return start <= window.host_until and start + duration >= window.keep_from

    @staticmethod
    def _code(table: dict, value) -> int:
        code = table.get(value)
        if code is None:
            code = table[value] = len(table)
        return code

    def profile(self, steps_analysed: int) -> TraceProfile:
        """The table per step; the columns are given up as it is made (one kind's arrays held at a time)."""
        marks = [] if self.window is not None and self.window.by_time else self.marks  # its markers were dropped
        span = (min(s for s, _ in marks), max(s + d for s, d in marks)) if marks else None
        steps = len(marks) if marks else max(steps_analysed, 1)
        device = self.device.joined()
        if span:
            device = _taken(device, np.flatnonzero(_launched_within(device, self.launches.joined(), *span)))
        kernel_times = _summed(device["name"], device["duration"], list(self.device_names))
        del device
        ops = self.ops.joined()
        if span:
            ops = _taken(ops, np.flatnonzero((span[0] <= ops["start"]) & (ops["start"] < span[1])))
        op_times = _self_times(ops, list(self.op_keys))
        return TraceProfile(_per_step(op_times, steps), _per_step(kernel_times, steps),
                            trace_gpu_name(self.metadata) or "", _world_size(self.metadata), steps)


OP_COLUMNS = (("start", np.float64), ("duration", np.float64), ("thread", np.int32), ("key", np.int32))
LAUNCH_COLUMNS = (("start", np.float64), ("correlation", np.int64))
DEVICE_COLUMNS = (("start", np.float64), ("duration", np.float64), ("name", np.int32), ("correlation", np.int64))


class _Columns:
    """Rows kept a piece at a time, each column an array of its own type (24-32 bytes a row); joined once, a
    column at a time, so that the pieces and the joined arrays are not all held together."""

    def __init__(self, columns: tuple):
        self.columns = columns
        self.chunks: list[list[np.ndarray]] = []

    def append(self, rows: list[tuple]) -> None:
        if rows:
            self.chunks.append([np.array(column, dtype=kind) for column, (_, kind) in zip(zip(*rows), self.columns)])

    def joined(self) -> dict[str, np.ndarray]:
        joined = {}
        for i, (name, kind) in enumerate(self.columns):
            joined[name] = np.concatenate([chunk[i] for chunk in self.chunks]) if self.chunks else np.zeros(0, kind)
            for chunk in self.chunks:
                chunk[i] = None
        self.chunks = []
        return joined


def _taken(columns: dict[str, np.ndarray], index: np.ndarray) -> dict[str, np.ndarray]:
    return {name: column[index] for name, column in columns.items()}



def _shapes(event: dict) -> str:
    dims = (event.get("args") or {}).get("Input Dims")
    return orjson.dumps(dims).decode() if dims else ""


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
