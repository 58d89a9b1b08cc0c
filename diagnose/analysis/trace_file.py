"""Read a trace file: its bytes (prefetched, or from disk and gunzipped) and, where the fast parser cannot
read them, its events through the full JSON parser: the text whole, or a piece at a time for a big trace."""
from __future__ import annotations

import math
from pathlib import Path
from typing import NamedTuple, Optional

import orjson

import diagnose.analysis.prefetch as prefetch
from diagnose.analysis import stream
from diagnose.analysis.classify import KINDS, empty_buckets, event_kind, thread_value
from diagnose.analysis.event_pieces import EventPieces, NotEvents
from diagnose.analysis.flop_ops import FlopOps, flop_ops_of_events
from diagnose.analysis.inflate import ERRORS as INFLATE_ERRORS
from diagnose.analysis.inflate import gunzip
from diagnose.analysis.memory_events import MemoryEvents, memory_of_events
from diagnose.analysis.spans import Spans
from diagnose.errors import UserError


def read_bytes(path: Path) -> bytes:
    prefetched = prefetch.take(path)
    if prefetched is not None:
        return prefetched
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


def parsed_in_pieces(path: Path, piece_bytes: Optional[int] = None) -> Optional[Parsed]:
    """The trace through the full JSON parser a piece at a time (event_pieces.py): any layout, in memory bounded
    by the spans' arrays and a few pieces of text. None where the file is not a whole trace (the whole-text
    reader then says what is wrong with it)."""
    pieces = EventPieces(path, piece_bytes or stream.PIECE_BYTES)
    parts: dict[str, list[Spans]] = {kind: [] for kind in KINDS}
    memory, flop_ops = [], []
    try:
        for events in pieces:
            for kind, rows in rows_by_kind(events).items():
                if rows:
                    parts[kind].append(Spans.of(rows))
            memory.append(memory_of_events(events))
            flop_ops.append(flop_ops_of_events(events))
            del events  # the piece's objects, before the next is parsed
    except (*INFLATE_ERRORS, orjson.JSONDecodeError, NotEvents):
        return None
    return Parsed(pieces.metadata, {kind: Spans.gathered(spans) for kind, spans in parts.items()},
                  MemoryEvents.concat(memory), FlopOps.concat(flop_ops))


def rows_by_kind(events: list) -> dict[str, list[tuple]]:
    """(start, duration, name, (pid, tid), correlation id) of each complete event the analysis uses, by kind."""
    rows = empty_buckets()
    for e in events:
        if not isinstance(e, dict) or e.get("ph") != "X" or not _finite(e.get("dur")) or not _finite(e.get("ts", 0.0)):
            continue  # not an event, or a complete event without a usable time: nothing to place on a timeline
        kind = event_kind(e)
        if kind is not None:
            name = e.get("name", "")
            rows[kind].append((e.get("ts", 0.0), e["dur"], name if isinstance(name, str) else str(name),
                               (thread_value(e.get("pid")), thread_value(e.get("tid"))), _correlation(e)))
    return rows


def _finite(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _correlation(e: dict) -> int:
    args = e.get("args")
    value = args.get("correlation") if isinstance(args, dict) else None
    fits = isinstance(value, int) and not isinstance(value, bool) and -(1 << 63) <= value < 1 << 63
    return value if fits else -1  # one past int64 links nothing, as the fast parser reads it
