"""Read a trace file: its bytes (prefetched, or from disk and gunzipped) and, where the fast parser cannot
read them, its events through the full JSON parser."""
from __future__ import annotations

import math
from pathlib import Path
from typing import Optional

import orjson

import diagnose.analysis.prefetch as prefetch
from diagnose.analysis.classify import empty_buckets, event_kind
from diagnose.analysis.inflate import ERRORS as INFLATE_ERRORS
from diagnose.analysis.inflate import gunzip
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


def parsed_rows(path: Path, raw: bytes) -> tuple[dict, dict[str, Spans]]:
    """(metadata, spans by kind) through the full JSON parser: any layout that Chrome-trace JSON allows."""
    data = read_events(path, raw)
    rows = empty_buckets()
    for e in data["traceEvents"]:
        if not isinstance(e, dict) or e.get("ph") != "X" or not _finite(e.get("dur")) or not _finite(e.get("ts", 0.0)):
            continue  # not an event, or a complete event without a usable time: nothing to place on a timeline
        kind = event_kind(e)
        if kind is not None:
            name = e.get("name", "")
            rows[kind].append((e.get("ts", 0.0), e["dur"], name if isinstance(name, str) else str(name),
                               (_scalar(e.get("pid")), _scalar(e.get("tid"))), _correlation(e)))
    metadata = {k: v for k, v in data.items() if k != "traceEvents"}
    return metadata, {kind: Spans.of(r) for kind, r in rows.items()}


def _scalar(value):
    """A pid or tid as it can key a table: a list or an object (no profiler writes one) as its JSON text."""
    return value if value is None or isinstance(value, (str, int, float)) else orjson.dumps(value).decode()


def _finite(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _correlation(e: dict) -> int:
    args = e.get("args")
    value = args.get("correlation") if isinstance(args, dict) else None
    fits = isinstance(value, int) and not isinstance(value, bool) and -(1 << 63) <= value < 1 << 63
    return value if fits else -1  # one past int64 links nothing, as the fast parser reads it
