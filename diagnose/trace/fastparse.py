"""The fast parser: Kineto writes every complete event with its keys in one order ("ph", "cat", "name", "pid",
"tid", "ts", "dur"), so those are read straight from the bytes with one regular expression, without building a
dict per event (most of a big trace's parsing time and memory). A forked helper reads pieces of the text from its
end meanwhile (`analyze` starts it before importing the rest of diagnose). Any other layout, or any doubt,
returns None and the full JSON parser reads the trace."""
from __future__ import annotations

import atexit
import contextlib
import mmap
import os
import pickle
import re
import signal
import struct
from typing import Any, Callable, NamedTuple, Optional

import numpy as np
import orjson

from diagnose.trace import jitscan
from diagnose.trace.classify import KINDS, event_kind, thread_of_text
from diagnose.trace.patterns import ID, ID_TEXT, NUMBER, SEP, STRING, STRING_TEXT, compiled
from diagnose.trace.spans import CODE, Spans, codes_of

_LABEL = rb'"cat":\s*"([^"\\]*)"' + SEP + rb'"name":\s*' + STRING
_THREAD = rb'"pid":\s*' + ID + SEP + rb'"tid":\s*' + ID
# host categories: their events link nothing (no launch), so their args are not searched for a correlation id
# (about a third of the expression's time on a trace of host ops); the spans of host kinds drop any id read
HOST_CATEGORIES = rb"cpu_op|operator|Operator|python_function|user_annotation|gpu_user_annotation"
LINKED_KINDS = ("kernel", "memcpy", "memset", "runtime")  # a launch and its device work, linked by correlation id
# The event's label (category and name: _LABEL's text) and thread (pid and tid: _THREAD's) are each one group, as
# written: a chunk has few distinct ones, each read into its parts once, not every event's.
# Every complete event matches, whatever its spacing: read whole (a label), the profiler's own span (its keys in
# another order, not needed: "Trace"), or neither (another layout: the full parser reads the trace).
FAST_EVENT = compiled(rb'"ph":\s*"X"(?:' + SEP + rb'(?:("cat":\s*"(?:(' + HOST_CATEGORIES + rb')"|[^"\\]*")' + SEP
                        + rb'"name":\s*"' + STRING_TEXT + rb'")' + SEP + rb'("pid":\s*(?:' + ID_TEXT + rb')' + SEP
                        + rb'"tid":\s*(?:' + ID_TEXT + rb'))' + SEP + rb'"ts":\s*' + NUMBER + SEP
                        + rb'"dur":\s*' + NUMBER
                        # the correlation id that links a launch to its device work: after the args' leading scalar
                        # members (Kineto writes it before any list); never read from another event's args
                        + rb'(?(2)|(?:' + SEP + rb'"args":\s*\{\s*(?:"[^"\\]*":\s*'
                        + rb'(?:[^,{}"\[\]\s][^,{}"\[\]]*|"[^"\\]*")' + SEP + rb')*?"correlation":\s*(\d+))?)'
                        + rb'|"cat":\s*"(Trace)"))?')
LABEL, THREAD = compiled(_LABEL), compiled(_THREAD)
EVENTS_KEY = re.compile(rb'"traceEvents"\s*:\s*\[')
CHUNK_BYTES = 4 << 20  # the most text a process reads at once


def fast_rows(raw: bytes, per_chunk: Optional[Callable[[bytes, int, int], Any]] = None) -> Optional[FastRows]:
    """(metadata, spans by kind, per_chunk(raw, start, end) of each chunk in order) read with one regular
    expression, in chunks of the text; None when the trace is not laid out as Kineto writes it (every complete
    event must match, or the full parser is used). A forked helper reads chunks meanwhile (re holds the GIL),
    `per_chunk`'s reading of them too (begin_rows starts a reading to finish later)."""
    reading = begin_rows(raw, per_chunk)
    return reading.finish() if reading is not None else None


def begin_rows(raw: bytes, per_chunk: Optional[Callable[[bytes, int, int], Any]] = None) -> Optional["_Reading"]:
    """Start reading `raw`: a forked helper claims its chunks from the end while this process goes on (importing
    the rest of diagnose, say); the reading's finish() then reads the chunks left from the front and gathers both.
    None when the text is not a whole trace in Kineto's layout (checked at its head and tail)."""
    key = EVENTS_KEY.search(raw)
    if key is None:
        return None
    metadata = _head_metadata(raw[:key.start()])
    if metadata is None:
        return None
    tail = _tail_metadata(raw[max(key.end(), len(raw) - 65536):])
    if not tail and not CLOSED.search(raw[-256:]):
        return None  # the text does not end as a whole trace does: cut short? the full parser will say
    metadata.update(tail)
    reading = _Reading(raw, metadata, key.end(), per_chunk)
    atexit.register(reading.abandon)  # (a process that ends before finishing it: its helper goes too)
    return reading


class _Reading:
    """A text's events read by two processes: this one claims pieces of it from the front, a forked helper from
    the end, until they meet; whichever is idle reads on (the helper starts first, while this process may still be
    importing). The pieces shrink as the text left does (a quarter of it, CHUNK_BYTES at most), so that both end
    about together."""

    def __init__(self, raw: bytes, metadata: dict, start: int, per_chunk):
        self.raw, self.metadata, self.start, self.per_chunk = raw, metadata, start, per_chunk
        shared = len(raw) - start > HELPER_OVER_BYTES and usable_cores() > 1 and hasattr(os, "fork")
        self.claims = _Claims(raw, start, shared)
        self.helper = _forked(lambda: self._read(from_end=True)) if shared else None

    def _read(self, from_end: bool) -> list[tuple[tuple[int, int], tuple]]:
        """((start, end), ((spans by kind, matched, complete), per_chunk's value)) of each piece it read."""
        caches: tuple[dict, dict, dict] = ({}, {}, {})  # names, threads and kinds decoded, across its pieces
        return [(bounds, self._piece(bounds, caches)) for bounds in iter(lambda: self.claims.claim(from_end), None)]

    def _piece(self, bounds: tuple[int, int], caches: tuple[dict, dict, dict]) -> tuple:
        return (_read_chunks(self.raw, [bounds], caches=caches),
                self.per_chunk(self.raw, *bounds) if self.per_chunk else None)

    def finish(self) -> Optional[FastRows]:
        atexit.unregister(self.abandon)
        read = self._read(from_end=False) + ((self.helper() or []) if self.helper is not None else [])
        self.claims.close()
        caches: tuple[dict, dict, dict] = ({}, {}, {})  # (a helper that failed: what it claimed is read here)
        gaps = _gaps(sorted(b for b, _ in read), self.start, len(self.raw))
        read += [(piece, self._piece(piece, caches)) for gap in gaps for piece in _chunks(self.raw, *gap)]
        results = [result for _, result in sorted(read, key=lambda piece: piece[0])]
        if sum(r[0][1] for r in results) != sum(r[0][2] for r in results):
            return None
        spans = {kind: Spans.gathered([p for r in results for p in r[0][0][kind]]) for kind in KINDS}
        return FastRows(self.metadata, spans, [r[1] for r in results] if self.per_chunk else [])

    def abandon(self) -> None:
        """Stop the helper of a reading that will not be finished, and let go of what it holds."""
        if self.helper is not None:
            self.helper.abandon()
            self.helper = None
        self.claims.close()


def _gaps(pieces: list[tuple[int, int]], start: int, end: int) -> list[tuple[int, int]]:
    """The stretches of start-end that no piece covers (pieces sorted, apart)."""
    gaps, at = [], start
    for low, high in pieces:
        if low > at:
            gaps.append((at, low))
        at = max(at, high)
    return gaps + ([(at, end)] if at < end else [])


MIN_CHUNK_BYTES = 256 << 10
HELPER_OVER_BYTES = 8 << 20  # a text this short is read by one process: a fork would cost more than it saves


def _lock_file():
    import tempfile  # (here: its imports, random and shutil among them, cost a small trace's start-up 5 ms)

    return tempfile.TemporaryFile()


class _Claims:
    """The stretch of text not yet claimed, claimed a piece at a time. `shared` by two processes: held in an
    anonymous shared mapping (created before the fork) and claimed under a record lock on a file, which the
    kernel lets go if its holder dies. Pieces are cut where an event's "ph" begins, as _chunks cuts."""

    def __init__(self, raw: bytes, start: int, shared: bool):
        self.raw = raw
        self.left = mmap.mmap(-1, 16)
        struct.pack_into("qq", self.left, 0, start, len(raw))
        self.lock = _lock_file() if shared else None

    def claim(self, from_end: bool) -> Optional[tuple[int, int]]:
        with self._locked():
            first, stop = struct.unpack_from("qq", self.left)
            if first >= stop:
                return None
            size = min(CHUNK_BYTES, max((stop - first) // 4, MIN_CHUNK_BYTES))
            if from_end:
                cut = self.raw.find(b'"ph"', max(stop - size, first), stop)
                cut = first if cut <= first else cut
                struct.pack_into("qq", self.left, 0, first, cut)
                return cut, stop
            cut = self.raw.find(b'"ph"', first + size, stop)
            cut = stop if cut < 0 else cut
            struct.pack_into("qq", self.left, 0, cut, stop)
            return first, cut

    @contextlib.contextmanager
    def _locked(self):
        if self.lock is None:
            yield
            return
        import fcntl  # (shared only where fork is: Unix)

        fcntl.lockf(self.lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.lockf(self.lock, fcntl.LOCK_UN)

    def close(self) -> None:
        if self.lock is not None:
            self.lock.close()


class FastRows(NamedTuple):
    metadata: dict
    spans: dict[str, Spans]
    per_chunk: list  # what fast_rows' per_chunk gave for each chunk, in the text's order


def _chunks(raw: bytes, start: int, stop: Optional[int] = None) -> list[tuple[int, int]]:
    """raw[start:stop] in pieces of about CHUNK_BYTES, cut where an event's "ph" begins."""
    stop = len(raw) if stop is None else stop
    bounds = []
    while start < stop:
        end = raw.find(b'"ph"', start + CHUNK_BYTES, stop)
        end = stop if end < 0 else end
        bounds.append((start, end))
        start = end
    return bounds


def _read_chunks(raw: bytes, chunks: list[tuple[int, int]], jit: bool = False,
                 caches: Optional[tuple[dict, dict, dict]] = None) -> tuple[dict[str, list[Spans]], int, int]:
    """(spans by kind, complete events matched, complete events there are) for these chunks; `jit`: through the
    compiled scanner (the same grammar), the expression where it cannot read a chunk. Both count every complete
    event, whatever its spacing, but the profiler's own span ("Trace"). `caches`: names, threads and kinds decoded,
    by their bytes (kept across calls)."""
    parts: dict[str, list[Spans]] = {k: [] for k in KINDS}
    caches = caches if caches is not None else ({}, {}, {})
    matched = complete = 0
    for start, end in chunks:
        scanned = jitscan.scan(raw, start, end) if jit else None
        added = _scanned_into(parts, raw, scanned, caches) if scanned is not None else None
        if added is not None:  # the scanner counted the chunk's complete events as it read them
            matched += added
            complete += scanned.complete
            continue
        found = FAST_EVENT.findall(raw, start, end)
        columns = tuple(zip(*found))
        others = columns[0].count(b"") if found else 0  # not read whole: the profiler's span, or another layout
        unread = others - columns[6].count(b"Trace") if others else 0
        if others:  # (a rare chunk: the one with the profiler's span)
            columns = tuple(zip(*(event for event in found if event[0])))
        added = _matched_into(parts, columns, caches) if columns else 0
        matched += added
        complete += added + unread
    return parts, matched, complete


def _matched_into(parts: dict[str, list[Spans]], columns: tuple, caches: tuple[dict, dict, dict]) -> int:
    """Add the expression's matches (its groups, a column each) to `parts`, as _coded_into does; return how many
    there are beside the profiler's own span."""
    label_texts, _, thread_texts, ts, durs, corrs, _ = columns
    label_of, label_table = _codes(label_texts)
    thread_of, thread_table = _codes(thread_texts)
    begin = np.fromiter(map(float, ts), dtype=np.float64, count=len(ts))
    duration = np.fromiter(map(float, durs), dtype=np.float64, count=len(durs))
    links = np.fromiter((int(c) if c and len(c) < 19 else _link(c) for c in corrs), dtype=np.int64, count=len(corrs))
    labels = [LABEL.fullmatch(text).groups() for text in label_table]
    threads = [THREAD.fullmatch(text).groups() for text in thread_table]
    return _coded_into(parts, _Coded(labels, label_of, threads, thread_of, begin, duration, links), caches)


def _codes(values: tuple) -> tuple[np.ndarray, list]:
    """Each value's index into a table of the distinct values, in order of first appearance; the table."""
    table = dict.fromkeys(values)
    for code, value in enumerate(table):
        table[value] = code
    return np.fromiter(map(table.__getitem__, values), dtype=np.int64, count=len(values)), list(table)


class _Coded:
    """A chunk's events with their labels (category, name) and threads (pid, tid) as raw bytes, once each, and
    each event's index into them: what both readers, the scanner and the expression, give."""

    def __init__(self, labels: list[tuple[bytes, bytes]], label_of: np.ndarray, threads: list[tuple[bytes, bytes]],
                 thread_of: np.ndarray, begin: np.ndarray, duration: np.ndarray, links: np.ndarray):
        self.labels, self.label_of, self.threads, self.thread_of = labels, label_of, threads, thread_of
        self.begin, self.duration, self.links = begin, duration, links


def _scanned_into(parts: dict[str, list[Spans]], raw: bytes, scanned, caches: tuple[dict, dict, dict]) -> Optional[int]:
    """Add what the compiled scanner read to `parts`, as the expression's results are added, and return the
    complete events matched (the profiler's own span not counted); None (nothing added) when two different labels
    or threads share a hash, which the expression then sorts out."""
    if not len(scanned.ints):
        return 0
    events = scanned_coded(raw, scanned)
    return _coded_into(parts, events, caches) if events is not None else None


def scanned_coded(raw: bytes, scanned) -> Optional[_Coded]:
    """The scanner's events with their labels and threads decoded once each; None when two different labels or
    threads share a hash."""
    ints = scanned.ints
    label_rows, label_of = _distinct(raw, scanned.label_hash, ints[:, 1:5])
    thread_rows, thread_of = _distinct(raw, scanned.thread_hash, ints[:, 5:9])
    if label_rows is None or thread_rows is None:
        return None
    labels = [(raw[a:b], raw[c:d]) for a, b, c, d in ints[label_rows, 1:5].tolist()]
    threads = [(raw[a:b], raw[c:d]) for a, b, c, d in ints[thread_rows, 5:9].tolist()]
    return _Coded(labels, label_of, threads, thread_of, scanned.begin, scanned.duration, ints[:, 9])


def _coded_into(parts: dict[str, list[Spans]], events: _Coded, caches: tuple[dict, dict, dict]) -> int:
    """Add a chunk's events to `parts` by kind, each name and thread decoded once; return how many there are
    beside the profiler's own span."""
    names, threads, kinds = caches
    texts = [names[n] if n in names else _decoded(names, n) for _, n in events.labels]
    labels = [(cat, text) for (cat, _), text in zip(events.labels, texts)]
    kind_of_label = [kinds[k] if k in kinds else _kind_into(kinds, k) for k in labels]
    ids = [threads[t] if t in threads else _thread_into(threads, t) for t in events.threads]
    profiler = np.asarray([cat == b"Trace" for cat, _ in events.labels])
    kind_of = np.asarray([KINDS.index(kind) if kind is not None else -1 for kind in kind_of_label])[events.label_of]
    # codes into tables of distinct names and threads (two labels may share a name, two byte forms a thread)
    name_codes, name_table = codes_of(texts)
    thread_codes, thread_table = codes_of(ids)
    names_of, threads_of = name_codes[events.label_of], thread_codes[events.thread_of]
    finish = events.begin + events.duration
    for code, kind in enumerate(KINDS):
        picks = np.flatnonzero(kind_of == code)
        if len(picks):
            links = events.links[picks]
            linked = kind in LINKED_KINDS and (links >= 0).any()
            links = links if linked else np.zeros(0, dtype=np.int64)  # host ops link nothing
            names, name_values = _own_table(names_of[picks], name_table)
            threads_here, thread_values = _own_table(threads_of[picks], thread_table)
            parts[kind].append(Spans(events.begin[picks], finish[picks], names, name_values, threads_here,
                                     thread_values, links))
    return len(events.label_of) - int(np.count_nonzero(profiler[events.label_of]))


def _own_table(codes: np.ndarray, table: list) -> tuple[np.ndarray, list]:
    """Codes into a table of only the values they use (a kind's masks then test its own names alone)."""
    used, inverse = np.unique(codes, return_inverse=True)
    return inverse.ravel().astype(CODE), [table[u] for u in used.tolist()]


def _distinct(raw: bytes, hashes: np.ndarray, spans: np.ndarray):
    """(a row of each distinct value, each row's distinct value) by hash; (None, None) if two differ in bytes."""
    _, first, inverse = np.unique(hashes, return_index=True, return_inverse=True)
    inverse = inverse.ravel()
    if not jitscan.same_bytes(raw, np.ascontiguousarray(spans), first[inverse]):
        return None, None
    return first, inverse


def _link(digits: bytes) -> int:
    """A correlation id (-1: none); one past int64 links nothing (no runtime call writes such an id)."""
    value = int(digits) if digits else -1
    return value if value < 1 << 63 else -1


def usable_cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def _forked(work):
    """Run work() in a forked copy of this process; returns a function that waits for its (picklable) result,
    or None when forking is not possible here. The result is None if the child failed."""
    if not hasattr(os, "fork"):
        return None
    read_end, write_end = os.pipe()
    try:
        pid = os.fork()
    except OSError:
        os.close(read_end)
        os.close(write_end)
        return None
    if pid == 0:  # the child: compute, send, leave without running any of the parent's cleanup
        code = 1
        try:
            os.close(read_end)
            _quiet()  # whoever reads this process' output must not wait for the child's copy of it
            with os.fdopen(write_end, "wb") as pipe:  # written as pickled: no whole copy of the result's bytes
                pickle.dump(work(), pipe, protocol=pickle.HIGHEST_PROTOCOL)
            code = 0
        finally:
            os._exit(code)
    os.close(write_end)

    def result():
        with os.fdopen(read_end, "rb") as pipe:
            try:  # unpickled as it arrives: the result's bytes are never held whole beside it
                value = pickle.load(pipe)
            except Exception:  # a child that failed mid-write leaves a pickle broken anywhere
                value = None
        _, status = os.waitpid(pid, 0)
        return value if status == 0 else None

    def abandon() -> None:
        try:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        except (ProcessLookupError, ChildProcessError):
            pass
        os.close(read_end)

    result.abandon = abandon  # stop the child, for a result nobody will wait for
    return result


def _quiet() -> None:
    """Standard input, output and error on /dev/null."""
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    os.close(null)


def _decoded(cache: dict, name: bytes) -> str:
    cache[name] = text = orjson.loads(b'"' + name + b'"') if b"\\" in name else name.decode()
    return text


def _kind_into(cache: dict, key: tuple) -> Optional[str]:
    cache[key] = kind = event_kind({"cat": key[0].decode(), "name": key[1]})
    return kind


def _thread_into(cache: dict, key: tuple) -> tuple:
    cache[key] = thread = (thread_of_text(key[0]), thread_of_text(key[1]))
    return thread


TAIL_KEY = re.compile(rb'\]\s*,\s*(?="[^"\\]+"\s*:)')
CLOSED = re.compile(rb"\]\s*\}\s*$")


def _tail_metadata(tail: bytes) -> dict:
    """The keys after traceEvents (traceName, baseTimeNanoseconds...)."""
    found = tail_members(tail)
    return found[1] if found else {}


def tail_members(text: bytes, start: int = 0) -> Optional[tuple[int, dict]]:
    """(where the event list ends, the keys after it): the first `]` from `start` on from which the rest of the
    text parses as an object's members; None when there is none."""
    for match in TAIL_KEY.finditer(text, start):
        try:
            value = orjson.loads(b"{" + text[match.end():])
        except orjson.JSONDecodeError:
            continue
        if isinstance(value, dict):
            return match.start(), value
    return None


def _head_metadata(head: bytes) -> Optional[dict]:
    """The keys before traceEvents (deviceProperties, distributedInfo...), parsed as an object of their own."""
    text = head.strip()
    if not text.startswith(b"{"):
        return None
    text = text.rstrip(b",") if text.endswith(b",") else text
    try:
        value = orjson.loads(text + b"}")
    except orjson.JSONDecodeError:
        return None
    return value if isinstance(value, dict) else None
