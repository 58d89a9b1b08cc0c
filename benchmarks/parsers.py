"""Which parser reads a trace's text fastest, on one core: the fast parser's three regular expressions (spans,
memory events, FLOP ops: what diagnose runs) against one typed msgspec decode that reads the same fields, and
orjson's whole parse, and the spans step by the expression and by the compiled scanner (numba, jitscan.py).
Prints seconds (best of two) per step on the same decompressed text.

    .venv/bin/python benchmarks/parsers.py TRACE.json.gz     # msgspec: pip install msgspec (not a dependency)
"""
from __future__ import annotations

import gzip
import sys
import time
from typing import Any, Optional, Union

import orjson

from diagnose.trace import fastparse
from diagnose.trace.flop_ops import FLOP_EVENT
from diagnose.trace.memory_events import MEMORY_EVENT


def best_of(work, runs: int = 2):
    best, result = float("inf"), None
    for _ in range(runs):
        start = time.perf_counter()
        result = work()
        best = min(best, time.perf_counter() - start)
    return best, result


def msgspec_decoder():
    """A schema of only the fields the analysis reads; msgspec skips the rest of each event without objects.
    (Module-level structs: with postponed annotations msgspec resolves the names in the module's globals.)"""
    if msgspec is None:
        raise ImportError("msgspec")
    return msgspec.json.Decoder(Trace)


try:
    import msgspec
except ImportError:
    msgspec = None
else:
    class Args(msgspec.Struct):
        correlation: Optional[int] = None
        total_allocated: Optional[int] = msgspec.field(name="Total Allocated", default=None)
        total_reserved: Optional[int] = msgspec.field(name="Total Reserved", default=None)
        nbytes: Optional[int] = msgspec.field(name="Bytes", default=None)
        device_type: Optional[int] = msgspec.field(name="Device Type", default=None)
        dims: Any = msgspec.field(name="Input Dims", default=None)
        types: Any = msgspec.field(name="Input type", default=None)

    class Event(msgspec.Struct):
        ph: str = ""
        cat: str = ""
        name: Union[str, int] = ""
        pid: Union[int, str] = 0
        tid: Union[int, str] = 0
        ts: Union[float, str] = 0.0
        dur: Optional[float] = None
        args: Optional[Args] = None

    class Trace(msgspec.Struct):
        traceEvents: list[Event]


def spans_by_regex_or_scanner(raw: bytes) -> None:
    """The spans step as diagnose runs it (8 MB chunks, to columns and Spans), by the expression and by the
    compiled scanner (jitscan.py), and the scanner's kernel alone."""
    from diagnose.trace import jitscan

    chunks = fastparse._chunks(raw, 0)
    regex, _ = best_of(lambda: fastparse._read_chunks(raw, chunks, False))
    print(f"  spans to Spans: regex {regex:6.2f} s", end="")
    if not jitscan.usable():
        print("; compiled scanner: numba is not installed")
        return
    scanned, _ = best_of(lambda: fastparse._read_chunks(raw, chunks, True))
    kernel, _ = best_of(lambda: [jitscan.scan(raw, a, b) for a, b in chunks])
    print(f", compiled scanner {scanned:6.2f} s (its kernel and number parse {kernel:.2f} s)")


def main(path: str) -> None:
    raw = gzip.decompress(open(path, "rb").read()) if path.endswith(".gz") else open(path, "rb").read()
    print(f"{path}: {len(raw) / 1e6:.0f} MB of text")
    total = 0.0
    for label, pattern in (("spans", fastparse.FAST_EVENT), ("memory events", MEMORY_EVENT), ("FLOP ops", FLOP_EVENT)):
        seconds, _ = best_of(lambda: pattern.findall(raw))
        total += seconds
        print(f"  regex {label:14s} {seconds:6.2f} s")
    print(f"  regex, all three     {total:6.2f} s")
    spans_by_regex_or_scanner(raw)
    try:
        decoder = msgspec_decoder()
    except ImportError:
        print("  msgspec: not installed (pip install msgspec)")
    else:
        seconds, trace = best_of(lambda: decoder.decode(raw))
        events = trace.traceEvents
        columns, _ = best_of(lambda: ([e.ts for e in events], [e.dur for e in events], [e.name for e in events],
                                      [(e.pid, e.tid) for e in events],
                                      [e.args.correlation if e.args else -1 for e in events]))
        print(f"  msgspec typed decode {seconds:6.2f} s + {columns:.2f} s to columns ({len(events)} events)")
        del trace, events
    seconds, _ = best_of(lambda: orjson.loads(raw), 1)
    print(f"  orjson whole parse   {seconds:6.2f} s (dicts for every event, before any column)")


if __name__ == "__main__":
    main(sys.argv[1])
