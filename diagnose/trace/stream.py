"""Reading a big trace as a stream: decompressed and parsed piece by piece, each piece cut where an event begins,
its text dropped once its events are in compact arrays. Peak memory is then the arrays plus a few pieces, not the
whole text (which grows with the trace: a 4 GB trace held whole needs about twice that). The pieces go through the
fast parser (fastparse.py, its spans by the compiled scanner of jitscan.py where numba loads; memory_events.py,
flop_ops.py); any doubt (a layout they do not read, a text that does not end as a whole trace does) returns None:
the objects are then parsed a piece at a time (event_pieces.py), and a file that is not a whole trace goes to the
whole-text parser, which says what is wrong with it."""
from __future__ import annotations

from pathlib import Path
from typing import Callable, Iterator, NamedTuple, Optional

import numpy as np

from diagnose.trace import jitscan
from diagnose.trace.classify import KINDS
from diagnose.trace.fastparse import (
    CLOSED,
    EVENTS_KEY,
    _coded_into,
    _forked,
    _head_metadata,
    _read_chunks,
    _tail_metadata,
    scanned_coded,
    usable_cores,
)
from diagnose.trace.flop_ops import COUNTED_NAMES, FlopOps, flop_ops_of_rows, read_flop_ops
from diagnose.trace.inflate import ERRORS as INFLATE_ERRORS
from diagnose.trace.inflate import inflater
from diagnose.trace.kept_steps import MAX_EVENTS, KeptSteps, StepCounter, flops_in, memory_in, spans_in
from diagnose.trace.memory_events import MemoryEvents, memory_of_scan, read_memory_events
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
    than parsing it). Past `max_events` events only a window of steps is kept (kept_steps.py): `agreed`, when the
    ranks of a job chose theirs together, else this trace's own, chosen by a first pass over the text. That pass
    is skipped where the text's head says the trace holds well under the budget: it is read at once, and should
    it pass the budget after all, the read stops there (holding no more than the budget) and the pass is made."""
    size = piece_bytes or PIECE_BYTES
    if agreed is None and not likely_over(path, max_events):
        limit = max_events if max_events > 0 and may_hold(path, max_events) else 0
        read = _streamed(path, size, None, limit)
        if read is not OVER_BUDGET:
            return read
    window = agreed if agreed is not None else text_kept_steps(path, max_events)
    return _streamed(path, size, window, 0)


OVER_BUDGET = "over budget"  # (a string: it comes back from the forked reader too)


def _streamed(path: Path, size: int, window: Optional[KeptSteps], limit: int):
    """stream_rows' reading, keeping `window`'s events (None: all); OVER_BUDGET when `limit` (0: none) complete
    events are passed."""
    jit = jitscan.usable()  # a trace read as a stream is big: numba's import pays for itself
    share_limit = -(-limit // 2)  # each process reads about half the events
    other = (_forked(lambda: _read_share(path, size, 1, 2, jit, window, share_limit) or False)
             if usable_cores() > 1 else None)
    mine = _read_share(path, size, 0, 2 if other else 1, jit, window, share_limit if other else limit)
    theirs = other() if other else None  # False: the helper could not read its pieces; None: it failed
    if other is not None and theirs is None and mine is not None and mine is not OVER_BUDGET:
        theirs = _read_share(path, size, 1, 2, jit, window, share_limit)  # its pieces are read here
    shares = [mine] + ([theirs] if other else [])
    if OVER_BUDGET in shares:
        return OVER_BUDGET
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


HEAD_SAMPLE_BYTES = 16 << 20


def likely_over(path: Path, max_events: int) -> bool:
    """Whether the trace may well hold more than `max_events` complete events: its text long enough to, and its
    head's events (the first HEAD_SAMPLE_BYTES) so dense that the whole text at that density holds half as many
    or more (torch's events take 250-400 bytes, a budget's worth of them 2.5 GB and more; the shortest, 100)."""
    if max_events <= 0 or not may_hold(path, max_events):
        return False
    try:
        size, sampled, events = _head_sample(path)
    except (OSError, *INFLATE_ERRORS):
        return True  # the first pass says what is wrong with it
    return not sampled or size * events / sampled >= max_events / 2


def _head_sample(path: Path) -> tuple[float, int, int]:
    """(the text's length, or an estimate of it, text sampled from its head, complete events in that sample). A big
    .gz's size field wraps at 4 GiB: its text is then estimated from the head's compression ratio."""
    with path.open("rb") as file:
        if file.read(2) != b"\x1f\x8b":
            file.seek(0)
            head = file.read(HEAD_SAMPLE_BYTES)
            return path.stat().st_size, len(head), _complete_in(head)
        file.seek(0)
        inflate, sampled, events, fed = inflater(), 0, 0, 0
        while sampled < HEAD_SAMPLE_BYTES and not inflate.eof:
            block = file.read(256 << 10)
            if not block:
                break
            fed += len(block)
            text = inflate.decompress(block)
            sampled, events = sampled + len(text), events + _complete_in(text)
    size = text_bytes(path)
    return (size if size is not None else path.stat().st_size * sampled / max(fed, 1)), sampled, events


def _complete_in(text: bytes) -> int:
    return text.count(b'"ph": "X"') + text.count(b'"ph":"X"')


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

    def __init__(self, parity: int, of: int, jit: bool, window: Optional[KeptSteps] = None, limit: int = 0):
        self.parity, self.of, self.jit, self.kept = parity, of, jit, window
        self.limit, self.events = limit, 0  # stop past `limit` complete events (0: no limit)
        self.pieces: dict[int, tuple] = {}
        self.started = False  # the events' list found (the pieces before are read by every share)
        self.head: dict = {}
        self.tail: dict = {}
        self.last = b""

    def wants(self, index: int) -> bool:
        """Whether this share reads the piece at `index` (every piece until the events' list began)."""
        return not self.started or index % self.of == self.parity

    def take(self, index: int, piece) -> bool:
        """Read one piece of whole events when it is this share's; False when the fast expressions cannot."""
        text = piece.tail if isinstance(piece, Skipped) else piece
        self.last = text[-TAIL_BYTES:] if len(text) >= TAIL_BYTES else (self.last + text)[-TAIL_BYTES:]
        if index % self.of != self.parity:
            return True
        parts, matched, complete, memory, flops = read_piece(piece, self.jit)
        if matched != complete:
            return False
        self.events += complete
        if self.limit and self.events > self.limit:
            raise _OverBudget
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


def read_piece(piece: bytes, jit: bool) -> tuple[dict[str, list[Spans]], int, int, MemoryEvents, FlopOps]:
    """(spans by kind, complete events matched, complete events there are, memory events, FLOP ops) of a piece of
    whole events: all from the compiled scanner's one pass where it reads the piece, else by the expressions."""
    scanned = jitscan.scan(piece, 0, len(piece)) if jit else None
    events = scanned_coded(piece, scanned) if scanned is not None and len(scanned.ints) else None
    if events is None:  # the scanner could not read it (or two labels share a hash): the expressions do
        parts, matched, complete = _read_chunks(piece, [(0, len(piece))], False)
        return parts, matched, complete, read_memory_events(piece), read_flop_ops(piece)
    parts: dict[str, list[Spans]] = {kind: [] for kind in KINDS}
    matched = _coded_into(parts, events, ({}, {}, {}))
    memory = memory_of_scan(piece, scanned.memory) if scanned.memory is not None else None
    return (parts, matched, scanned.complete, read_memory_events(piece) if memory is None else memory,
            _scanned_flop_ops(piece, scanned, events))


def _scanned_flop_ops(piece: bytes, scanned, events) -> FlopOps:
    """The FLOP ops among the scanner's events: those whose name is a counted one."""
    counted = np.array([name in COUNTED_NAMES for _, name in events.labels])
    rows = np.flatnonzero(counted[events.label_of])
    if not len(rows):
        return FlopOps()
    ints = scanned.ints
    return flop_ops_of_rows(piece, zip([events.labels[code][1] for code in events.label_of[rows].tolist()],
                                       [events.threads[code] for code in events.thread_of[rows].tolist()],
                                       scanned.begin[rows].tolist(), scanned.duration[rows].tolist(),
                                       ints[rows, 14].tolist()))


class _OverBudget(Exception):
    pass


def _read_share(path: Path, piece_bytes: int, parity: int, of: int, jit: bool,
                window: Optional[KeptSteps] = None, limit: int = 0):
    """This share's pieces; None when the stream cannot read the file (the whole-text path then reads it, and
    says what is wrong with it in its own words); OVER_BUDGET past `limit` complete events."""
    share = _Share(parity, of, jit, window, limit)
    try:
        pieces = enumerate(_pieces(path, piece_bytes, share.wants))
        if not _read_head(pieces, share):
            return None
        for index, piece in pieces:
            if not share.take(index, piece):
                return None
    except INFLATE_ERRORS:  # unreadable here: the whole-text path says why in its own words
        return None
    except _OverBudget:
        return OVER_BUDGET
    return share if share.finish() else None


def _read_head(pieces: Iterator[tuple[int, bytes]], share: _Share) -> bool:
    """The metadata before the events, from the first pieces; the events after it go to `share`."""
    found = head_and_events(pieces)
    if found is None:
        return False
    share.head, index, events = found
    share.started = True
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


class Skipped(NamedTuple):
    """A piece another process reads: only its text's end is kept (where the keys after the events are)."""
    tail: bytes


def _pieces(path: Path, piece_bytes: int, wants: Callable[[int], bool] = lambda index: True) -> Iterator:
    """The decompressed text in pieces of about `piece_bytes`, each ending where an event's object begins (the
    `{` before a `"ph"`), so that no event is split; a piece that `wants(index)` does not want is not joined into
    one text: Skipped. Where a piece is cut depends on the text alone, so that every process cuts alike."""
    blocks: list[bytes] = []
    size = index = 0
    for block in _decompressed(path):
        blocks.append(block)
        size += len(block)
        if size < piece_bytes:
            continue
        cut = _last_event_start(block)
        if cut > 0:  # within the last block: the piece is the blocks before and that block's head
            head = memoryview(block)[:cut]
            piece = b"".join(blocks[:-1] + [head]) if wants(index) else Skipped(_tail_of(blocks[:-1], head))
            blocks, size = [block[cut:]], len(block) - cut
        else:
            text = b"".join(blocks)
            cut = _last_event_start(text)
            if cut <= 0:
                blocks, size = [text], len(text)
                continue
            piece, blocks, size = text[:cut], [text[cut:]], len(text) - cut
        yield piece
        index += 1
    if size:
        yield b"".join(blocks)


def _tail_of(blocks: list[bytes], head: memoryview) -> bytes:
    """The last TAIL_BYTES of the blocks followed by head."""
    if len(head) >= TAIL_BYTES or not blocks:
        return bytes(head[-TAIL_BYTES:])
    return (blocks[-1][-TAIL_BYTES:] + bytes(head))[-TAIL_BYTES:]


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

