"""Self times of nested spans (ops, Python frames): each span's time less its direct children's on its thread, by
one rule for the analysis and compare's op table alike; array operations where spans nest, else the walk
(nesting.py), compiled by numba on a big trace."""
from __future__ import annotations

import numpy as np

from diagnose.trace import jitscan
from diagnose.trace.jitscan import CODE
from diagnose.trace.nesting import walk_nesting
from diagnose.trace.spans import Spans


def self_times(ops: Spans, tids: set) -> tuple[np.ndarray, np.ndarray]:
    """Self time of each op and whether it is top-level on a thread of `tids` (span_self_times)."""
    codes, threads = ops.thread_codes()
    return span_self_times(ops.start, ops.end, codes, np.asarray([t in tids for t in threads], dtype=bool))


def span_self_times(starts: np.ndarray, ends: np.ndarray, codes: np.ndarray,
                    counted: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The one self-time rule (analysis and compare's op table): each span's duration less the part of each direct
    child's on its thread (`codes`) that lies inside it. A child that outlives its parent takes from it only
    until the parent ends (the rest of the child is not the parent's time), and no self time is below 0. Also
    whether each span is top-level on a thread that `counted` (by thread code) says is training work."""
    n = len(starts)
    kernels = jitscan.loaded()
    # by thread, start, then longest first (a parent before the children that start with it)
    order = _nesting_order(starts, ends, codes) if n else np.zeros(0, dtype=np.int64)
    if kernels is not None:  # numba is loaded already (a big trace): the walk over arrays, compiled
        self_t, top = ends - starts, np.zeros(n, dtype=bool)
        # the types jitscan's sample check compiled (another dtype or layout would compile again, seconds)
        starts, ends = np.ascontiguousarray(starts), np.ascontiguousarray(ends)
        kernels.walk_nesting(order.astype(np.intp, copy=False), codes.astype(CODE, copy=False), starts, ends,
                             counted, np.empty(n, dtype=np.int64), self_t, top)
        return np.maximum(self_t, 0.0), top
    nested = nested_self_times(order, codes, starts, ends, counted) if n else None
    if nested is not None:
        return nested
    # plain lists are fast to index in Python (small ints and floats: one shared object each where they repeat)
    self_t, top = (ends - starts).tolist(), [False] * n
    walk_nesting(order.tolist(), codes.tolist(), starts.tolist(), ends.tolist(), counted.tolist(), [0] * n, self_t,
                 top)
    return np.maximum(np.asarray(self_t, dtype=np.float64), 0.0), np.asarray(top, dtype=bool)


def nested_self_times(order: np.ndarray, codes: np.ndarray, starts: np.ndarray, ends: np.ndarray,
                      counted: np.ndarray):
    """walk_nesting's self times and top-level flags by array operations, where each thread's ops nest or are
    apart (as a profiler's ops do); None where some do not (two that overlap, neither inside the other: the walk
    then runs). Each parent's children are subtracted in the walk's order: the same sums to the last bit."""
    nested = nesting_parents(order, codes, starts, ends)
    if nested is None:
        return None
    depth, inner, parent = nested
    thread, start, end = codes[order], starts[order], ends[order]
    self_t = ends - starts
    np.subtract.at(self_t, order[parent], (end - start)[inner])
    top = np.zeros(len(starts), dtype=bool)
    top[order[depth == 0]] = counted[thread[depth == 0]]
    return np.maximum(self_t, 0.0), top


def nesting_parents(order: np.ndarray, codes: np.ndarray, starts: np.ndarray, ends: np.ndarray,
                    outliving: bool = False):
    """(depth, the positions in `order` that have a parent, their parents' positions) of spans in walk_nesting's
    `order` (by thread, start, the longest first), where each thread's spans nest or are apart; None where some do
    not (`outliving`: a span that ends after its parent is let pass). The walk's parent of a span is the last one
    before it still open at its start; with nesting, the spans open there are its ancestors, so its depth is their
    count and its parent the last span before it one level up."""
    if np.any(ends < starts):  # (a negative duration: closed before it opened, which the counts below miss)
        return None
    thread, start, end = codes[order], starts[order], ends[order]
    walked = _walked_parents(thread, start, end)
    if walked is not None:
        return walked
    n = len(order)
    position = np.arange(n)
    first_of_thread = np.flatnonzero(np.r_[True, thread[1:] != thread[:-1]])
    thread_first = np.repeat(first_of_thread, np.diff(np.r_[first_of_thread, n]))
    closed = np.empty(n, dtype=np.int64)  # spans of the thread that end by each span's start (some after it)
    for low, high in zip(first_of_thread.tolist(), [*first_of_thread[1:].tolist(), n]):
        closed[low:high] = np.searchsorted(np.sort(end[low:high]), start[low:high], side="right")
    # of those, the ones not before it: empty spans at its very start, which the order puts last among that start's
    instant = end == start
    group = np.cumsum(np.r_[True, (thread[1:] != thread[:-1]) | (start[1:] != start[:-1])]) - 1
    group_end = np.r_[np.flatnonzero(group[1:] != group[:-1]) + 1, n]
    later_instants = np.where(instant, group_end[group] - position, np.bincount(group, weights=instant)[group])
    depth = (position - thread_first) - (closed - later_instants.astype(np.int64))
    inner = np.flatnonzero(depth > 0)
    levels = depth * n + position  # the parent: the last span before, one level up
    by_level = np.sort(levels)
    parent = by_level[np.searchsorted(by_level, (depth[inner] - 1) * n + inner) - 1] % n
    if not (np.all(thread[parent] == thread[inner]) and np.all(end[parent] > start[inner])
            and (outliving or np.all(end[inner] <= end[parent])) and np.all(depth[parent] == depth[inner] - 1)):
        return None
    return depth, inner, parent


def _walked_parents(thread: np.ndarray, start: np.ndarray, end: np.ndarray):
    """nesting_parents' result from the compiled walk, on a big trace (its kernels loaded) whose spans nest; None
    where they do not (or no kernels): the counts then decide."""
    kernels = jitscan.for_size(len(start))
    if kernels is None:
        return None
    n = len(start)
    depth, parent, stack = np.empty(n, dtype=np.int64), np.empty(n, dtype=np.int64), np.empty(n, dtype=np.int64)
    if not kernels.walk_parents(thread.astype(np.int64), np.ascontiguousarray(start, dtype=np.float64),
                                np.ascontiguousarray(end, dtype=np.float64), stack, depth, parent):
        return None
    inner = np.flatnonzero(depth > 0)
    return depth, inner, parent[inner]


def _nesting_order(starts: np.ndarray, ends: np.ndarray, codes: np.ndarray) -> np.ndarray:
    """np.lexsort by thread, start and -end; on a big trace whose threads' ops come in that order already (a
    compiled check), a stable sort by thread alone: the same order, without lexsort's copies of every key."""
    kernels = jitscan.for_size(len(codes))
    if kernels is not None:
        starts, ends = np.ascontiguousarray(starts), np.ascontiguousarray(ends)
        last = np.full(int(codes.max()) + 1, -1, dtype=np.int64)
        if kernels.in_thread_order(codes.astype(CODE, copy=False), starts, ends, last):
            return np.argsort(codes, kind="stable")
    return np.lexsort((-ends, starts, codes))



