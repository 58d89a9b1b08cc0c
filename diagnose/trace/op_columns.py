"""The columns compare's op table needs of a trace, read as a stream, a piece of its text at a time
(event_pieces.py: any layout JSON allows), kept in compact arrays: host ops (start, duration, thread, name and
shapes), the host's step marks, runtime launches (start, correlation id) and device work (start, duration, name,
correlation id). A 1M-event trace held as parsed JSON takes gigabytes. A trace past `max_events` keeps only the
window of steps its analysis chose (kept_steps.py)."""
from __future__ import annotations

from pathlib import Path
from typing import Iterable, Optional

import numpy as np
import orjson

from diagnose.trace.classify import CPU_OP, KERNEL, MEMCPY, MEMSET, RUNTIME, complete_events, correlation_id
from diagnose.trace.event_pieces import PIECE_BYTES, EventPieces, NotEvents
from diagnose.trace.inflate import ERRORS as INFLATE_ERRORS
from diagnose.trace.kept_steps import KeptSteps
from diagnose.trace.prefetch import MAX_EVENTS
from diagnose.trace.trace_file import kept_steps_of, read_events

DEVICE_KINDS = KERNEL | MEMCPY | MEMSET
HOST_MARK_KINDS = CPU_OP | {"user_annotation"}  # where ProfilerStep# sits on the host, old traces and new
NO_CORRELATION = -1  # as classify.correlation_id gives it


def read_op_columns(path: Path, max_events: int = MAX_EVENTS, piece_bytes: int = PIECE_BYTES) -> "OpColumns":
    """The columns of a trace's events (of its window of steps past `max_events`), read piece by piece; a layout
    the pieces are not read in is parsed whole, as the analysis then reads it."""
    return _streamed(path, piece_bytes, kept_steps_of(path, max_events)) or whole_text_columns(path)


def whole_text_columns(path: Path) -> "OpColumns":
    """The table's columns from the trace parsed whole (every event: no window)."""
    data = read_events(path)
    table = OpColumns(None)
    table.add(data["traceEvents"])
    table.metadata = data
    return table


def _streamed(path: Path, piece_bytes: int, window: Optional[KeptSteps]) -> Optional["OpColumns"]:
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

    def __init__(self, window: Optional[KeptSteps]):
        self.kept = window
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
        window = self.kept
        return window is None or window.keep_from <= start < window.keep_until  # the next step starts there

    def _on_device(self, start: float, duration: float, correlation: int) -> bool:
        window = self.kept
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


def _shapes(event: dict) -> str:
    dims = (event.get("args") or {}).get("Input Dims")
    return orjson.dumps(dims).decode() if dims else ""
