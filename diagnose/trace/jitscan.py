"""fastparse's expression, compiled: the same grammar walked byte by byte by numba, so that a big trace's complete
events are read at a few hundred MB/s without a Python object per event.

It returns, per event, where its category, name, pid and tid lie in the text (with a 64-bit hash of each label
and thread, so that Python decodes each distinct one once), its ts and dur (parsed in the kernel where one IEEE
operation gives the correctly rounded value Python's float gives, else by numpy from their text: the same
parse), and its correlation id. The grammar is
FAST_EVENT's, step by step (see _match); a test compares both on every trace in tests/data.

Importing numba and loading the cached kernels costs about 0.6 s and 100 MB, which only a trace big enough to be
read as a stream (stream.py) pays back, so only that path uses it. The first use on a machine compiles the
kernels (a few seconds) into numba's cache. Once loaded, the analysis of that trace uses them too (ops.self_times'
walk, nesting.py; union, intersect and subtract, interval_sweeps.py; the launch lookup, key_join.py). Where numba
cannot be imported, or its kernels fail to compile or to read a sample, the expression reads every trace and
numpy does the arithmetic."""
from __future__ import annotations

import os
from typing import Optional

import numpy as np

CODE = np.int32  # a span's thread, name or key as an index into its table: the type the compiled walks take
FIELDS = 15  # mark, cat, name, pid and tid start/end, correlation, ts and dur start/end, the args' `{` (-1: none)
MEMORY_FIELDS = 8  # mark, pid and tid start/end, ts start/end, whether an allocator's ("Total Allocated" there)

_compiled = None
PASS_FROM = 4096


SAMPLE = (b'{"traceEvents": [{"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 1.5, "dur": 2, '
          b'"args": {"correlation": 3}}]}')


def usable() -> bool:
    """Whether the compiled scanner can read here: numba is installed and its kernels load (DIAGNOSE_NO_JIT=1
    turns it off, and the expression reads everything). Loads the kernels, so that a forked reader has them."""
    if os.environ.get("DIAGNOSE_NO_JIT") == "1":
        return False
    if _compiled is None:
        _load()
    return bool(_compiled)


def _load() -> None:
    """Import the kernels and run them once on a sample (numba loads its cached machine code on a first call)."""
    global _compiled
    try:
        from diagnose.trace import _jitkernels
    except Exception:  # no numba on this platform, or no place to cache its code: the expression reads every trace
        _compiled = False
        return
    _compiled = _jitkernels
    try:  # both kernels, so that a forked reader has them loaded too; a compiler that fails leaves the expression
        scanned = scan(SAMPLE, 0, len(SAMPLE))
        ok = scanned is not None and len(scanned.ints) == 1
        ok = ok and same_bytes(SAMPLE, np.ascontiguousarray(scanned.ints[:, 1:5]), np.zeros(1, dtype=np.int64))
        ok = ok and _walks_sample(_jitkernels) and _sweeps_sample(_jitkernels) and _joins_sample(_jitkernels)
    except Exception:
        ok = False
    if not ok:
        _compiled = False


def _walks_sample(kernels) -> bool:
    """nesting.py's walks on small samples (the nesting walk: an op holding another, self time 3 - 1 = 2 for the
    parent, 1 for the child; the outermost walk, the order check, the first appearances), with the argument types
    their callers pass (one compiled signature each: the one the analysis runs)."""
    self_t, top = np.array([3.0, 1.0]), np.zeros(2, dtype=bool)
    kernels.walk_nesting(np.array([0, 1], dtype=np.intp), np.zeros(2, dtype=CODE), np.array([0.0, 1.0]),
                         np.array([3.0, 2.0]), np.ones(1, dtype=bool), np.empty(2, dtype=np.int64), self_t, top)
    if not (self_t.tolist() == [2.0, 1.0] and top.tolist() == [True, False]):
        return False
    keep = np.empty(3, dtype=np.intp)  # flops.outermost_in's walk: [0, 4) holds [1, 2); [5, 6) is kept too
    n = kernels.walk_outermost(np.array([0, 1, 2], dtype=np.intp), np.zeros(3, dtype=CODE),
                               np.array([0.0, 1.0, 5.0]), np.array([4.0, 1.0, 1.0]), np.full(1, -np.inf), keep)
    if keep[:n].tolist() != [0, 2]:
        return False
    in_order = kernels.in_thread_order(np.zeros(2, dtype=CODE), np.array([0.0, 0.0]), np.array([3.0, 2.0]),
                                       np.full(1, -1, dtype=np.int64))  # ops.self_times' order check
    if not in_order or kernels.in_thread_order(np.zeros(2, dtype=CODE), np.array([1.0, 0.0]), np.array([2.0, 2.0]),
                                               np.full(1, -1, dtype=np.int64)):
        return False
    depth, parent = np.empty(2, dtype=np.int64), np.empty(2, dtype=np.int64)  # self_time_rule's walk of parents
    nests = kernels.walk_parents(np.zeros(2, dtype=np.int64), np.array([0.0, 1.0]), np.array([3.0, 2.0]),
                                 np.empty(2, dtype=np.int64), depth, parent)
    if not (nests and depth.tolist() == [0, 1] and parent.tolist() == [-1, 0]):
        return False
    times, location, library = np.empty((5, 2)), np.empty(5, dtype=np.int64), np.empty(5, dtype=np.bool_)
    n = kernels.walk_frames(np.array([0.0, 1.0]), np.array([3.0, 2.0]), np.array([1, 3], dtype=np.int64),
                            np.array([0, 1], dtype=np.int64), np.empty(2), np.empty(2, dtype=np.int64),
                            np.empty(2, dtype=np.bool_), times, location, library)  # frames' sweep: user, torch
    if times[:n].tolist() != [[0.0, 1.0], [1.0, 2.0], [2.0, 3.0]] or library[:n].tolist() != [False, True, False]:
        return False
    first, out = np.full(3, -1, dtype=np.int64), np.empty(3, dtype=CODE)  # spans.present_in_order's walk
    n = kernels.walk_first_seen(np.array([2, 0, 2, 1, 0], dtype=CODE), first, out)
    return out[:n].tolist() == [2, 0, 1]


def _sweeps_sample(kernels) -> bool:
    """The interval passes on two small sets, with the argument types intervals.py passes (its only signatures:
    a union over a stacked array's columns, or over a Spans' start and end arrays)."""
    a = np.array([[1.0, 3.0], [0.0, 2.0], [5.0, 6.0]])
    order, out = np.array([1, 0, 2], dtype=np.intp), np.empty_like(a)
    stacked = out[:kernels.union_into(a[:, 0], a[:, 1], order, out)].tolist()
    columns = out[:kernels.union_into(a[:, 0].copy(), a[:, 1].copy(), order, out)].tolist()
    merged = stacked == columns == [[0.0, 3.0], [5.0, 6.0]]
    merged = merged and not kernels.ascending(a[:, 0], order[:0]) and kernels.ascending(a[:, 0].copy(), order)
    chain, cut = np.array([[0.0, 3.0], [5.0, 6.0]]), np.array([[2.0, 5.5]])
    both, out = kernels.is_chain(chain) and kernels.is_chain(cut), np.empty((3, 2))
    inside = out[:kernels.coverage_into(chain, cut, False, out)].tolist() == [[2.0, 3.0], [5.0, 5.5]]
    outside = out[:kernels.coverage_into(chain, cut, True, out)].tolist() == [[0.0, 2.0], [5.5, 6.0]]
    return merged and both and inside and outside


def _joins_sample(kernels) -> bool:
    """The lookup by correlation id, with the argument types timeline.from_launch passes (its only signature)."""
    keys, values, out = np.array([7, -1, 3, 7], dtype=np.int64), np.arange(4, dtype=np.int64), np.empty(4, np.int64)
    order = np.argsort(keys, kind="stable")
    kernels.values_by_key(keys, order, values, np.array([7, 3, 5, -1], dtype=np.int64), np.int64(-1), out)
    return out.tolist() == [0, 2, -1, -1] and not kernels.ascending(keys, order[:0])  # its order check


def _kernels():
    return _compiled


def for_size(size: int):
    """The compiled kernels for arrays of `size` items, when a big trace has loaded them and `size` is at least
    PASS_FROM (fewer cost numpy less time than a call into the kernels, and little memory); else None."""
    return loaded() if size >= PASS_FROM else None


def loaded():
    """The compiled kernels when a big trace has loaded them already (never loads them: numba's import would cost a
    small trace more than it saves), else None."""
    return _compiled or None


class Scanned:
    """What the compiled scanner read from one chunk: one row per complete event it matched, and one per memory
    event (`memory`: None when it met one it could not read, and the expressions read the chunk's)."""

    def __init__(self, ints: np.ndarray, begin: np.ndarray, duration: np.ndarray, label_hash: np.ndarray,
                 thread_hash: np.ndarray, complete: int, memory: Optional["ScannedMemory"] = None):
        self.ints, self.begin, self.duration = ints, begin, duration
        self.label_hash, self.thread_hash = label_hash, thread_hash
        self.complete = complete  # the chunk's complete events, matched or not, beside the profiler's own span
        self.memory = memory


class ScannedMemory:
    """The memory events of a chunk: where each one's pid, tid and ts lie, whether it is an allocator's, its ts,
    its amounts (Total Allocated, Total Reserved, Bytes, Device Type) and a hash of its thread."""

    def __init__(self, rows: np.ndarray, ts: np.ndarray, amounts: np.ndarray, thread_hash: np.ndarray):
        self.rows, self.ts, self.amounts, self.thread_hash = rows, ts, amounts, thread_hash


def scan(raw: bytes, start: int, end: int) -> Optional[Scanned]:
    """The complete events that start in raw[start:end]; None when the scanner cannot say (a number longer than
    it parses, a correlation id past int64): the expression then reads the chunk."""
    kernels = _kernels()
    text = np.frombuffer(raw, dtype=np.uint8)
    end = min(end, len(raw))  # the kernel reads up to `end` unchecked
    capacity = (end - start) // 256 + 64  # Kineto's events take 300 bytes and more; fewer rows are grown
    counts = np.zeros(4, dtype=np.int64)
    while True:
        ints = np.empty((capacity, FIELDS), dtype=np.int64)
        values = np.empty((capacity, 2), dtype=np.float64)
        hashes = np.empty((capacity, 2), dtype=np.uint64)
        memory = (np.empty((capacity, MEMORY_FIELDS), dtype=np.int64), np.empty(capacity, dtype=np.float64),
                  np.empty((capacity, 4), dtype=np.int64), np.empty(capacity, dtype=np.uint64))
        count = kernels.scan(text, start, end, ints, values, hashes, counts, memory)
        if count != kernels.FULL:
            break
        capacity *= 4
    if count < 0:
        return None
    ints, values, hashes = ints[:count], values[:count], hashes[:count]
    if not _parse_rest(raw, ints, values, ((10, 11), (12, 13))):
        return None
    return Scanned(ints, values[:, 0].copy(), values[:, 1].copy(), hashes[:, 0].copy(), hashes[:, 1].copy(),
                   int(counts[0] - counts[1]), _memory_read(raw, memory, int(counts[2]), int(counts[3])))


def _memory_read(raw: bytes, memory: tuple, count: int, unread: int) -> Optional[ScannedMemory]:
    if unread:
        return None
    rows, ts, amounts, thread_hash = (a[:count] for a in memory)
    ts = ts.reshape(-1, 1)
    if not _parse_rest(raw, rows, ts, ((5, 6),)):
        return None
    return ScannedMemory(rows, ts[:, 0].copy(), amounts.copy(), thread_hash.copy())


def _parse_rest(raw: bytes, ints: np.ndarray, values: np.ndarray, spans: tuple) -> bool:
    """The numbers the kernel left (NaN: too many digits, or an exponent past 22, for one exact operation) parsed
    from their text by numpy, the same correctly rounded parse; False where one does not parse. spans: the
    columns of ints where each column of values' text begins and ends."""
    rows, columns = np.nonzero(np.isnan(values))
    if not len(rows):
        return True
    begins, ends = (np.array([pair[k] for pair in spans]) for k in (0, 1))
    bounds = ints[rows, begins[columns]], ints[rows, ends[columns]]
    try:
        values[rows, columns] = np.array([raw[a:b] for a, b in zip(*(x.tolist() for x in bounds))]).astype(np.float64)
    except ValueError:
        return False
    return True


def same_bytes(raw: bytes, spans: np.ndarray, representative: np.ndarray) -> bool:
    """Whether every row's two spans (start, end, start, end) hold the same bytes as its representative row's:
    the check that two labels with one hash are one label."""
    return bool(_kernels().same_bytes(np.frombuffer(raw, dtype=np.uint8), spans, representative))
