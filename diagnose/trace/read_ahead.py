"""A trace's reading begun while `diagnose analyze` imports the rest of diagnose: its text, and the fast parser's
reading of it under way in a forked helper. Light on purpose (the fast parser, the prefetch and the file's reading
only): the parse begins before the reader's other modules, the analysis and the report load, and load_trace
finishes it."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from diagnose.errors import UserError
from diagnose.trace.fastparse import begin_rows
from diagnose.trace.prefetch import Prefetch, read_as_stream, read_bytes


@dataclass(frozen=True)
class ReadAhead:
    """A trace's reading begun before load_trace is called: its text, and the fast parser's reading of it under way
    (None: the text is not in Kineto's layout, the full parser reads it)."""
    path: str
    raw: bytes
    reading: Optional[object]


def begin_reading(path: Path, prefetched: Optional[Prefetch] = None) -> Optional[ReadAhead]:
    """Begin reading a trace that load_trace will read whole (with the default budget): a forked helper parses
    its chunks while this process imports the rest of diagnose. `prefetched`: its bytes, being read already. None
    where load_trace will stream it, or it cannot be read (load_trace reports that)."""
    if not path.is_file() or read_as_stream(path):
        return None
    raw = prefetched.bytes() if prefetched is not None else None
    if raw is None:
        try:
            raw = read_bytes(path)
        except UserError:
            return None
    return ReadAhead(str(path), raw, begin_rows(raw, per_chunk=events_between))


def events_between(raw: bytes, start: int, end: int) -> tuple:
    """The memory events and the FLOP-counted ops of the text between two offsets (read with the spans, chunk by
    chunk). Imported here, where a chunk is read: in the parser's helper, while the parent imports the rest."""
    from diagnose.trace.flop_ops import read_flop_ops
    from diagnose.trace.memory_events import memory_events_between

    return memory_events_between(raw, start, end), read_flop_ops(raw, start, end)
