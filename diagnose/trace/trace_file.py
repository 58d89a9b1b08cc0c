"""Read a trace file: its bytes (gunzipped where compressed) and, where the fast parser cannot
read them, its events through the full JSON parser: the text whole, or a piece at a time for a big trace."""
from __future__ import annotations

from pathlib import Path
from typing import NamedTuple, Optional

import orjson

from diagnose.errors import UserError
from diagnose.trace import stream
from diagnose.trace.classify import KINDS, complete_events, correlation_id, empty_buckets, event_kind, thread_value
from diagnose.trace.event_pieces import EventPieces, NotEvents
from diagnose.trace.flop_ops import FlopOps, flop_ops_of_events
from diagnose.trace.inflate import ERRORS as INFLATE_ERRORS
from diagnose.trace.inflate import gunzip
from diagnose.trace.kept_steps import KeptSteps, ObjectCounter, StepCounter, flops_in, memory_in, spans_in
from diagnose.trace.memory_events import MemoryEvents, memory_of_events
from diagnose.trace.release import give_back_freed_memory
from diagnose.trace.spans import Spans


def read_bytes(path: Path) -> bytes:
    try:
        raw = path.read_bytes()
        return gunzip(raw) if raw[:2] == b"\x1f\x8b" else raw
    except INFLATE_ERRORS as exc:
        raise UserError(f"cannot read trace {path}: {exc}", "pass a torch.profiler trace (.json or .json.gz)")


def read_events(path: Path, raw: Optional[bytes] = None) -> dict:
    try:
        data = orjson.loads(read_bytes(path) if raw is None else raw)
    except orjson.JSONDecodeError as exc:
        cut = "end of data" in str(exc) or "EOF" in str(exc)
        raise UserError(f"cannot read trace {path}: {exc}" + (" (the file looks cut short)" if cut else ""),
                        "copy the whole file again" if cut else "pass a torch.profiler trace (.json or .json.gz)")
    if isinstance(data, list):  # a bare event list is also valid Chrome-trace JSON
        data = {"traceEvents": data}
    if not isinstance(data, dict) or not isinstance(data.get("traceEvents"), list):
        raise UserError(f"{path} is not a Chrome trace: no traceEvents list", "pass a torch.profiler trace")
    return data


class Parsed(NamedTuple):
    metadata: dict
    spans: dict[str, Spans]
    memory: MemoryEvents
    flop_ops: FlopOps


def parsed_whole(path: Path, raw: bytes) -> Parsed:
    """The trace through the full JSON parser, its text whole: any layout that Chrome-trace JSON allows."""
    data = read_events(path, raw)
    events = data["traceEvents"]
    return Parsed({k: v for k, v in data.items() if k != "traceEvents"},
                  {kind: Spans.of(r) for kind, r in rows_by_kind(events).items()},
                  memory_of_events(events), flop_ops_of_events(events))


def parsed_in_pieces(path: Path, piece_bytes: Optional[int] = None,
                     window: Optional[KeptSteps] = None) -> Optional[Parsed]:
    """The trace through the full JSON parser a piece at a time (event_pieces.py): any layout, in memory bounded
    by the spans' arrays and a few pieces of text; with a `window`, only its steps' events are kept. None where the
    file is not a whole trace (the whole-text reader then says what is wrong with it)."""
    pieces = EventPieces(path, piece_bytes)
    parts: dict[str, list[Spans]] = {kind: [] for kind in KINDS}
    memory, flop_ops = [], []
    try:
        for events in pieces:
            spans = {kind: [Spans.of(rows)] for kind, rows in rows_by_kind(events).items() if rows}
            piece_memory, piece_flop_ops = memory_of_events(events), flop_ops_of_events(events)
            del events  # the piece's objects, before the next is parsed
            if window is not None:
                spans = {kind: spans_in(window, kind, found) for kind, found in spans.items()}
                piece_memory, piece_flop_ops = memory_in(window, piece_memory), flops_in(window, piece_flop_ops)
            for kind, found in spans.items():
                parts[kind].extend(found)
            memory.append(piece_memory)
            flop_ops.append(piece_flop_ops)
    except (*INFLATE_ERRORS, orjson.JSONDecodeError, NotEvents):
        return None
    return Parsed(pieces.metadata, {kind: Spans.gathered(found) for kind, found in parts.items()},
                  MemoryEvents.concat(memory), FlopOps.concat(flop_ops))


def kept_steps_of_objects(path: Path, max_events: int, piece_bytes: Optional[int] = None) -> Optional[KeptSteps]:
    """The window of steps to keep of a trace in another layout that holds more than `max_events` events: a first
    pass parses its pieces and counts (window.ObjectCounter); None: keep every event (or not a whole trace)."""
    if max_events <= 0 or not stream.may_hold(path, max_events):
        return None
    counter = object_counted(path, piece_bytes)
    if counter is None:
        return None
    window = counter.kept_steps(max_events)
    del counter
    give_back_freed_memory()  # the pieces' objects: the second pass starts from nothing held
    return window


def object_counted(path: Path, piece_bytes: Optional[int] = None) -> Optional[ObjectCounter]:
    """The first pass over a trace in another layout, over its parsed objects; None when it is not a whole trace."""
    counter = ObjectCounter()
    try:
        for events in EventPieces(path, piece_bytes):
            counter.feed_events(events)
    except (*INFLATE_ERRORS, orjson.JSONDecodeError, NotEvents):
        return None
    return counter


def first_pass(path: Path, max_events: int) -> Optional[StepCounter]:
    """The first pass over a trace that may hold more than `max_events` events (None: it cannot, or no budget):
    over its text, or over its objects where its events are in a layout the text's pass does not read."""
    counter = stream.text_counted(path, max_events)
    if counter is not None and counter.kineto_layout is False:
        return object_counted(path)
    return counter


def kept_steps_of(path: Path, max_events: int) -> Optional[KeptSteps]:
    """The window of steps to keep of a trace in any layout that holds more than `max_events` events (None: keep
    every event), chosen by the first pass its layout needs."""
    counter = first_pass(path, max_events)
    window = counter.kept_steps(max_events) if counter is not None else None
    del counter
    give_back_freed_memory()
    return window


def rows_by_kind(events: list) -> dict[str, list[tuple]]:
    """(start, duration, name, (pid, tid), correlation id) of each complete event the analysis uses, by kind."""
    rows = empty_buckets()
    for e, start, duration in complete_events(events):  # (an event without a usable time is on no timeline)
        kind = event_kind(e)
        if kind is not None:
            name = e.get("name", "")
            rows[kind].append((start, duration, name if isinstance(name, str) else str(name),
                               (thread_value(e.get("pid")), thread_value(e.get("tid"))), correlation_id(e)))
    return rows
