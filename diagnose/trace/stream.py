"""Reading a big trace as a stream: decompressed and parsed piece by piece, each piece cut where an event begins,
its text dropped once its events are in compact arrays. Peak memory is then the arrays plus a few pieces, not the
whole text (which grows with the trace: a 4 GB trace held whole needs about twice that). The pieces go through the
fast parser (fastparse.py, its spans by the compiled scanner of jitscan.py where numba loads; memory_events.py,
flop_ops.py); any doubt (a layout they do not read, a text that does not end as a whole trace does) returns None:
the objects are then parsed a piece at a time (event_pieces.py), and a file that is not a whole trace goes to the
whole-text parser, which says what is wrong with it."""
from __future__ import annotations

from pathlib import Path
from typing import Iterator, Optional

from diagnose.trace import jitscan
from diagnose.trace.classify import KINDS
from diagnose.trace.fastparse import (
    CLOSED,
    EVENTS_KEY,
    _forked,
    _head_metadata,
    _read_chunks,
    _tail_metadata,
    usable_cores,
)
from diagnose.trace.flop_ops import FlopOps, read_flop_ops
from diagnose.trace.inflate import ERRORS as INFLATE_ERRORS
from diagnose.trace.inflate import inflater
from diagnose.trace.kept_steps import MAX_EVENTS, KeptSteps, StepCounter, flops_in, memory_in, spans_in
from diagnose.trace.memory_events import MemoryEvents, read_memory_events
from diagnose.trace.prefetch import text_bytes
from diagnose.trace.release import give_back_freed_memory
from diagnose.trace.spans import Spans

READ_BYTES = 4 << 20
PIECE_BYTES = 8 << 20  # text parsed at once: the bound on the text held, beside the arrays
TAIL_BYTES = 65536


def stream_rows(path: Path, piece_bytes: Optional[int] = None, max_events: int = MAX_EVENTS,
                agreed: Optional[KeptSteps] = None):
    """(metadata, spans by kind, memory events, FLOP ops, the window of steps kept or None) of the trace at `path`,
    read as a stream; None when the fast expressions cannot read it all (the caller then parses the whole text).
    With two cores a forked process parses every other piece (both inflate the whole text, which costs far less
    than parsing it). Past `max_events` events only a window of steps is kept (window.py): `agreed`, when the
    ranks of a job chose theirs together, else this trace's own."""
    size = piece_bytes or PIECE_BYTES
    window = agreed if agreed is not None else text_kept_steps(path, max_events)
    jit = jitscan.usable()  # a trace read as a stream is big: numba's import pays for itself
    other = _forked(lambda: _read_share(path, size, 1, 2, jit, window) or False) if usable_cores() > 1 else None
    mine = _read_share(path, size, 0, 2 if other else 1, jit, window)
    theirs = other() if other else None  # False: the helper could not read its pieces; None: it failed
    if other is not None and theirs is None and mine is not None:  # its pieces are read here
        theirs = _read_share(path, size, 1, 2, jit, window)
    shares = [mine] + ([theirs] if other else [])
    if not all(shares):
        return None
    head, tail = mine.head, mine.tail
    pieces = sorted((index, piece) for share in shares for index, piece in share.pieces.items())
    parts = [piece for _, piece in pieces]
    spans = {kind: Spans.gathered([s for part in parts for s in part[0][kind]]) for kind in KINDS}
    memory = MemoryEvents.concat([part[1] for part in parts])
    flops = FlopOps.concat([part[2] for part in parts])
    del parts, pieces, shares, mine, theirs
    give_back_freed_memory()  # the pieces' text and temporaries: the analysis starts from the arrays alone
    return {**head, **tail}, spans, memory, flops, window


def text_kept_steps(path: Path, max_events: int) -> Optional[KeptSteps]:
    """The window of steps to keep when the trace holds more than `max_events` events (a first pass over its text
    counts them, skipped where the text is too short to hold that many); None: keep every event."""
    counter = text_counted(path, max_events)
    if counter is None:
        return None
    window = counter.kept_steps(max_events)
    del counter
    give_back_freed_memory()  # before the reading pass forks its helper, which would hold the pages too
    return window


def text_counted(path: Path, max_events: int) -> Optional[StepCounter]:
    """The first pass over a trace that may hold more than `max_events` events (None: it cannot, or no budget)."""
    if max_events <= 0 or not may_hold(path, max_events):
        return None
    counter = StepCounter()
    try:
        for block in _decompressed(path):
            counter.feed(block)
        counter.finish()
    except INFLATE_ERRORS:  # the reading pass says what is wrong with the file, in its own words
        return None
    return counter


MIN_EVENT_BYTES = 100  # the shortest complete event Kineto writes is longer (its ops carry args)


def may_hold(path: Path, events: int) -> bool:
    """Whether the trace's text may be long enough to hold `events` complete events."""
    try:
        size = text_bytes(path)
    except OSError:
        return True  # the reading pass reports it
    return size is None or size >= events * MIN_EVENT_BYTES


class _Share:
    """One process's share of the pieces (every `of`-th, from `parity`): what each left, by piece index."""

    def __init__(self, parity: int, of: int, jit: bool, window: Optional[KeptSteps] = None):
        self.parity, self.of, self.jit, self.kept = parity, of, jit, window
        self.pieces: dict[int, tuple] = {}
        self.head: dict = {}
        self.tail: dict = {}
        self.last = b""

    def take(self, index: int, piece: bytes) -> bool:
        """Read one piece of whole events when it is this share's; False when the fast expressions cannot."""
        self.last = piece[-TAIL_BYTES:] if len(piece) >= TAIL_BYTES else (self.last + piece)[-TAIL_BYTES:]
        if index % self.of != self.parity:
            return True
        parts, matched, complete = _read_chunks(piece, [(0, len(piece))], self.jit)
        if matched != complete:
            return False
        memory, flops = read_memory_events(piece), read_flop_ops(piece)
        if self.kept is not None:  # only the window's events are kept: memory bounded by its size
            parts = {kind: spans_in(self.kept, kind, spans) for kind, spans in parts.items()}
            memory, flops = memory_in(self.kept, memory), flops_in(self.kept, flops)
            if not (len(memory) or len(flops) or any(parts.values())):
                return True  # nothing of the window here: not even an entry is kept
        self.pieces[index] = (parts, memory, flops)
        return True

    def finish(self) -> bool:
        """The text must end as a whole trace does; the keys after the events are kept."""
        self.tail = _tail_metadata(self.last)
        return bool(self.tail) or bool(CLOSED.search(self.last[-256:]))


def _read_share(path: Path, piece_bytes: int, parity: int, of: int, jit: bool,
                window: Optional[KeptSteps] = None) -> Optional[_Share]:
    """This share's pieces; None when the stream cannot read the file (the whole-text path then reads it, and
    says what is wrong with it in its own words)."""
    share = _Share(parity, of, jit, window)
    try:
        pieces = enumerate(_pieces(path, piece_bytes))
        if not _read_head(pieces, share):
            return None
        for index, piece in pieces:
            if not share.take(index, piece):
                return None
    except INFLATE_ERRORS:  # unreadable here: the whole-text path says why in its own words
        return None
    return share if share.finish() else None


def _read_head(pieces: Iterator[tuple[int, bytes]], share: _Share) -> bool:
    """The metadata before the events, from the first pieces; the events after it go to `share`."""
    found = head_and_events(pieces)
    if found is None:
        return False
    share.head, index, events = found
    return share.take(index, events)


def head_and_events(pieces: Iterator[tuple[int, bytes]]) -> Optional[tuple[dict, int, bytes]]:
    """(the metadata before the event list, the index of the piece the list starts in, that piece's text from the
    list's first event on), read from the first (index, piece)s; None when the text has no event list near its
    start or its metadata does not parse (not a trace the stream reads)."""
    text = b""
    for index, piece in pieces:
        text += piece
        key = EVENTS_KEY.search(text)
        if key is not None:
            head = _head_metadata(text[:key.start()])
            return None if head is None else (head, index, text[key.end():])
        if len(text) > 64 << 20:
            return None
    return None


def _pieces(path: Path, piece_bytes: int) -> Iterator[bytes]:
    """The decompressed text in pieces of about `piece_bytes`, each ending where an event's object begins (the
    `{` before a `"ph"`), so that no event is split."""
    blocks: list[bytes] = []
    size = 0
    for block in _decompressed(path):
        blocks.append(block)
        size += len(block)
        if size < piece_bytes:
            continue
        text = b"".join(blocks)  # one copy of the blocks a piece (adding each block to the last copied it again)
        cut = _last_event_start(text)
        rest = text[cut:] if cut > 0 else text
        if cut > 0:
            yield text[:cut]
        blocks, size = [rest], len(rest)
    if size:
        yield b"".join(blocks)


def _last_event_start(text: bytes) -> int:
    """Where the last event that starts in `text` begins (0: none found)."""
    ph = text.rfind(b'"ph"')
    return max(text.rfind(b"{", 0, ph), 0) if ph > 0 else 0


def _decompressed(path: Path) -> Iterator[bytes]:
    """The file's text in blocks of at most READ_BYTES (a trace's text compresses 10-20x: a block of compressed
    input is inflated a bounded slice at a time)."""
    with path.open("rb") as file:
        gzipped = file.read(2) == b"\x1f\x8b"
        file.seek(0)
        if not gzipped:
            while block := file.read(READ_BYTES):
                yield block
            return
        inflate = inflater()
        while True:
            if inflate.eof:  # a member ended; another may follow (gzip files written one after the other)
                pending, inflate = inflate.unused_data, inflater()  # (zlib leaves the same bytes in unconsumed_tail)
            else:
                pending = inflate.unconsumed_tail
            pending = pending or file.read(READ_BYTES >> 3)
            if not pending:
                break
            yield inflate.decompress(pending, READ_BYTES)
        yield inflate.flush()

