"""The fast parser: Kineto writes every complete event with its keys in one order ("ph", "cat", "name", "pid",
"tid", "ts", "dur"), so those are read straight from the bytes with one regular expression, without building a
dict per event (most of a big trace's parsing time and memory). A big trace's second half is read by a forked
process meanwhile. Any other layout, or any doubt, returns None and the full JSON parser reads the trace."""
from __future__ import annotations

import os
import pickle
import re
from typing import Optional

import numpy as np
import orjson

from diagnose.analysis import jitscan
from diagnose.analysis.classify import KINDS, event_kind
from diagnose.analysis.spans import CODE, Spans, codes_of

_NUMBER = rb"(-?\d+(?:\.\d*)?(?:[eE][-+]?\d+)?)"
_ID = rb'(-?\d+|"[^"\\]*")'
_STRING = rb'"([^"\\]*(?:\\.[^"\\]*)*)"'  # unrolled: much faster than (?:[^"\\]|\\.)*
FAST_EVENT = re.compile(rb'"ph":\s*"X",\s*"cat":\s*"([^"\\]*)",\s*"name":\s*' + _STRING + rb',\s*"pid":\s*' + _ID
                        + rb',\s*"tid":\s*' + _ID + rb',\s*"ts":\s*' + _NUMBER + rb',\s*"dur":\s*' + _NUMBER
                        # the correlation id that links a launch to its device work: after the args' leading scalar
                        # members (Kineto writes it before any list); never read from another event's args
                        + rb'(?:,\s*"args":\s*\{\s*(?:"[^"\\]*":\s*(?:[^,{}"\[\]\s][^,{}"\[\]]*|"[^"\\]*"),\s*)*?'
                        + rb'"correlation":\s*(\d+))?')
EVENTS_KEY = re.compile(rb'"traceEvents"\s*:\s*\[')
CHUNK_BYTES = 8 << 20


def fast_rows(raw: bytes) -> Optional[tuple[dict, dict[str, Spans]]]:
    """(metadata, spans by kind) read with one regular expression, in chunks of the text; None when the trace
    is not laid out as Kineto writes it (every complete event must match, or the full parser is used).
    A big trace's second half of chunks is read by a forked process meanwhile (re holds the GIL)."""
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
    pretty = raw.find(b'"ph": "X"', key.end()) >= 0
    if pretty and raw.find(b'"ph":"X"', key.end()) >= 0:
        return None  # both layouts in one file: not Kineto's writer
    chunks = _chunks(raw, key.end())
    half = len(chunks) // 2
    other = _forked(lambda: _read_chunks(raw, chunks[half:], pretty)) if half and _cores() > 1 else None
    mine = _read_chunks(raw, chunks[:half] if other else chunks, pretty)
    theirs = other() if other else None
    if other is not None and theirs is None:  # the helper process failed: read its chunks here
        theirs = _read_chunks(raw, chunks[half:], pretty)
    results = [mine] + ([theirs] if theirs else [])
    matched, complete = sum(r[1] for r in results), sum(r[2] for r in results)
    if matched != complete:
        return None
    return metadata, {kind: Spans.gathered([p for r in results for p in r[0][kind]]) for kind in KINDS}


def _chunks(raw: bytes, start: int) -> list[tuple[int, int]]:
    """About CHUNK_BYTES each, cut where an event's "ph" begins."""
    bounds = []
    while start < len(raw):
        end = raw.find(b'"ph"', start + CHUNK_BYTES)
        end = len(raw) if end < 0 else end
        bounds.append((start, end))
        start = end
    return bounds


def _read_chunks(raw: bytes, chunks: list[tuple[int, int]], pretty: bool,
                 jit: bool = False) -> tuple[dict[str, list[Spans]], int, int]:
    """(spans by kind, complete events matched, complete events there are) for these chunks; `jit`: through the
    compiled scanner (the same grammar), the expression where it cannot read a chunk."""
    parts: dict[str, list[Spans]] = {k: [] for k in KINDS}
    names: dict[bytes, str] = {}
    threads: dict[tuple, tuple] = {}
    kinds: dict[tuple, Optional[str]] = {}
    complete_mark, other_mark = (b'"ph": "X"', b'"ph":"X"') if pretty else (b'"ph":"X"', b'"ph": "X"')
    profiler_span = b'"ph": "X", "cat": "Trace"' if pretty else b'"ph":"X","cat":"Trace"'
    matched = complete = 0
    for start, end in chunks:
        scanned = jitscan.scan(raw, start, end) if jit else None
        added = _scanned_into(parts, raw, scanned, (names, threads, kinds)) if scanned is not None else None
        if added is not None:  # the scanner counted the chunk's complete events as it read them, any spacing
            matched += added
            complete += scanned.complete
            continue
        # Kineto writes '"ph": "X"' (pretty) or '"ph":"X"' (compact); other spacing fails the count: full parser.
        # The profiler's own span ("Trace") has its keys in another order and is not needed.
        complete += raw.count(complete_mark, start, end) - raw.count(profiler_span, start, end)
        if jit and raw.find(other_mark, start, end) >= 0:
            complete += 1  # both layouts (the stream checks only without the scanner): a mismatch, the full parser
        found = FAST_EVENT.findall(raw, start, end)
        if not found:
            continue
        cats, raw_names, pids, tids, ts, durs, corrs = zip(*found)
        label_codes: dict[tuple, int] = {}
        label_of = np.fromiter((label_codes.setdefault(k, len(label_codes)) for k in zip(cats, raw_names)),
                               dtype=np.int64, count=len(found))
        thread_codes: dict[tuple, int] = {}
        thread_of = np.fromiter((thread_codes.setdefault(t, len(thread_codes)) for t in zip(pids, tids)),
                                dtype=np.int64, count=len(found))
        begin = np.fromiter(map(float, ts), dtype=np.float64, count=len(ts))
        duration = np.fromiter(map(float, durs), dtype=np.float64, count=len(durs))
        links = np.fromiter((int(c) if c and len(c) < 19 else _link(c) for c in corrs), dtype=np.int64,
                            count=len(corrs))
        events = _Coded(list(label_codes), label_of, list(thread_codes), thread_of, begin, duration, links)
        matched += _coded_into(parts, events, (names, threads, kinds))
    return parts, matched, complete


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
    ints = scanned.ints
    if not len(ints):
        return 0
    label_rows, label_of = _distinct(raw, scanned.label_hash, ints[:, 1:5])
    thread_rows, thread_of = _distinct(raw, scanned.thread_hash, ints[:, 5:9])
    if label_rows is None or thread_rows is None:
        return None
    labels = [(raw[a:b], raw[c:d]) for a, b, c, d in ints[label_rows, 1:5].tolist()]
    threads = [(raw[a:b], raw[c:d]) for a, b, c, d in ints[thread_rows, 5:9].tolist()]
    events = _Coded(labels, label_of, threads, thread_of, scanned.begin, scanned.duration, ints[:, 9])
    return _coded_into(parts, events, caches)


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
            links = links if (links >= 0).any() else np.zeros(0, dtype=np.int64)  # host ops link nothing
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


def _cores() -> int:
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

    return result


def _decoded(cache: dict, name: bytes) -> str:
    cache[name] = text = orjson.loads(b'"' + name + b'"') if b"\\" in name else name.decode()
    return text


def _kind_into(cache: dict, key: tuple) -> Optional[str]:
    cache[key] = kind = event_kind({"cat": key[0].decode(), "name": key[1]})
    return kind


def _thread_into(cache: dict, key: tuple) -> tuple:
    cache[key] = thread = (_id(key[0]), _id(key[1]))
    return thread


def _id(raw: bytes):
    return raw[1:-1].decode() if raw[:1] == b'"' else int(raw)


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
