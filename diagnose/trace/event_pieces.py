"""A trace's events as parsed objects, a piece of its text at a time, in any layout JSON allows (keys in any order,
any spacing, a bare event list): what reads a trace the fast expressions cannot, in bounded memory. Each piece is
cut between two events of the list and parsed by orjson. A cut is only tried where one object ends and another
begins with the first event's first key (`}, {"ph":`: a writer orders every event's keys alike); one inside an
event (a list of objects in its args) leaves that event's braces open, so the piece does not parse and another cut
is tried (_split)."""
from __future__ import annotations

import re
from itertools import islice
from pathlib import Path
from typing import Iterator, Optional

import orjson

from diagnose.trace.fastparse import CLOSED, EVENTS_KEY, _head_metadata, tail_members
from diagnose.trace.stream import TAIL_BYTES, _decompressed

# text parsed at once: its objects take far more than its size (a 1M-event trace with sorted keys, whole process:
# 4.30 s and 238 MiB with 2 MB pieces, 4.44 s and 365 MiB with 8 MB, 4.91 s and 220 MiB with 1 MB; one run each)
PIECE_BYTES = 2 << 20
CUT = re.compile(rb"\}\s*,\s*(?=\{)")  # the text after the cut begins with the next object's `{`
FIRST_KEY = re.compile(rb'\s*\{\s*("[^"\\]*")\s*:')
CUT_REACH = 256 << 10  # where cuts are looked for: the text's last 256 KB (an event is far shorter)
CUT_TRIES = 16  # cuts tried, from the last, before the piece grows by the next one
HEAD_BYTES = 64 << 20  # the metadata before the event list (deviceProperties...) is never longer
BARE_CLOSED = re.compile(rb"\]\s*$")


class NotEvents(ValueError):
    """A text that is not a trace's event list read whole: a piece that does not parse as events, no event list,
    or an end that is not a trace's."""


class EventPieces:
    """Iterate to get each piece's events (a list of parsed objects, in the text's order); `metadata` holds the
    keys before and after the event list once the iteration ends. Raises NotEvents, orjson.JSONDecodeError or an
    inflate error where the file is not a whole trace (the whole-text reader then says what is wrong in its words).
    """

    def __init__(self, path: Path, piece_bytes: Optional[int] = None):
        self.path, self.piece_bytes = path, piece_bytes or PIECE_BYTES
        self.metadata: dict = {}

    def __iter__(self) -> Iterator[list]:
        texts = _texts(self.path, self.piece_bytes)
        text, bare = self._head(texts)
        cuts = _cuts_before(text)
        for piece in texts:
            text += piece
            split = _split(text, cuts)
            if split is not None:
                events, text = split
                yield events
        end, tail = _events_end(text, bare)
        yield _parsed(text[:end])
        self.metadata.update(tail)

    def _head(self, texts: Iterator[bytes]) -> tuple[bytes, bool]:
        """The text from the list's first event on, and whether the list is bare (the file is only the list)."""
        text = b""
        for piece in texts:
            text += piece
            start = text.lstrip()
            if start.startswith(b"["):
                return start[1:], True
            key = EVENTS_KEY.search(text)
            if key is not None:
                head = _head_metadata(text[:key.start()])
                if head is None:
                    raise NotEvents("the keys before the event list do not parse")
                self.metadata = head
                return text[key.end():], False
            if len(text) > HEAD_BYTES:
                break
        raise NotEvents("no event list near the start of the text")


def _texts(path: Path, piece_bytes: int) -> Iterator[bytes]:
    """The decompressed text in pieces of `piece_bytes` (cut anywhere; a block inflated may be longer)."""
    pending = b""
    for block in _decompressed(path):
        pending = pending + block if pending else block
        while len(pending) >= piece_bytes:
            yield pending[:piece_bytes]
            pending = pending[piece_bytes:]
    if pending:
        yield pending


def _cuts_before(events: bytes) -> re.Pattern:
    """Where one object ends and another begins whose first key is the first event's: a writer gives its events
    their keys in one order, and the objects inside an event (in its args) have other keys, so nearly every such
    cut lies between two events; CUT where the first event's key cannot be read."""
    first = FIRST_KEY.match(events)
    return re.compile(rb"\}\s*,\s*(?=\{\s*" + re.escape(first.group(1)) + rb"\s*:)") if first else CUT


def _split(text: bytes, cuts: re.Pattern) -> Optional[tuple[list, bytes]]:
    """(the events before the last cut tried that parses, the text after it); None when none parses. The last
    cut is tried first (nearly always between two events); then, as `text` begins between two events, the cuts
    with as many braces closed as opened before them, the last first; then (a string with braces in it unbalances
    every count) cuts spread over the reach, as the cuts inside one event lie together."""
    found = list(cuts.finditer(text, max(0, len(text) - CUT_REACH)))
    for cut in islice(_candidates(text, found), CUT_TRIES):
        try:
            return _parsed(text[:cut.start() + 1]), text[cut.end():]
        except (orjson.JSONDecodeError, NotEvents):
            continue
    return None


def _candidates(text: bytes, found: list[re.Match]) -> Iterator[re.Match]:
    if not found:
        return
    yield found[-1]
    opened, start, balanced = 0, 0, []
    for cut in found:
        end = cut.start() + 1
        opened += text.count(b"{", start, end) - text.count(b"}", start, end)
        start = end
        if opened == 0:
            balanced.append(cut)
    yield from balanced[::-1]
    yield from found[::-1][::max(1, len(found) // CUT_TRIES)]


def _parsed(text: bytes) -> list:
    """The events of whole event objects separated by commas."""
    text = text.strip().rstrip(b",")
    events = orjson.loads(b"[" + text + b"]") if text else []
    if not isinstance(events, list):
        raise NotEvents("not a list of events")
    return events


def _events_end(text: bytes, bare: bool) -> tuple[int, dict]:
    """Where the event list ends in the text's last part, and the keys after it (traceName...): the first `]` from
    which the rest parses as an object's members, else the `]` that closes the object (or a bare list)."""
    if bare:
        closed = BARE_CLOSED.search(text, max(0, len(text) - 256))
        if closed is None:
            raise NotEvents("the event list is not closed: the file looks cut short")
        return closed.start(), {}
    found = tail_members(text, max(0, len(text) - TAIL_BYTES))
    if found is not None:
        return found
    closed = CLOSED.search(text, max(0, len(text) - 256))
    if closed is None:
        raise NotEvents("the trace's object is not closed: the file looks cut short")
    return closed.start(), {}
