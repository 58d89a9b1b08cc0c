"""Op-level statistics from a trace: top ops by self time, top-level op counts, syncs, copies, GEMM kernels."""
from __future__ import annotations

import re

import numpy as np

import diagnose.analysis.intervals as iv
from diagnose.analysis import jitscan
from diagnose.analysis.nesting import walk_nesting
from diagnose.analysis.spans import CODE, Spans, present_in_order
from diagnose.analysis.trace import Trace
from diagnose.model import OpStat

GEMM_KERNEL = re.compile(r"gemm|conv|cutlass|xmma|wgrad|dgrad|fprop|implicit_convolve", re.I)
TENSOR_CORE_KERNEL = re.compile(r"h884|h1688|h16816|s1688|s16816|i8816|hmma|tensorop|"
                                r"16816|1688|884|bf16|f16|tf32|wmma|_tc_", re.I)


# Elementwise, normalization and reduction work: each reads and writes its whole tensor for little arithmetic,
# so it is bound by memory bandwidth, and a chain of them is what a compiler fuses into one pass.
ELEMENTWISE_KERNEL = re.compile(r"elementwise|reduce_kernel|vectorized|softmax|layer_?norm|batch_?norm|dropout|"
                                r"CatArray", re.I)
ELEMENTWISE_OPS = frozenset(
    "add add_ sub sub_ mul mul_ div div_ neg exp log pow sqrt rsqrt tanh sigmoid relu relu_ gelu silu "
    "threshold_backward gelu_backward silu_backward sigmoid_backward tanh_backward native_layer_norm "
    "native_layer_norm_backward _softmax _softmax_backward_data _log_softmax _log_softmax_backward_data "
    "native_dropout native_dropout_backward masked_fill masked_fill_ where clamp clamp_min fill_ zero_ copy_ "
    "addcmul_ addcdiv_ lerp_ mean sum var_mean native_batch_norm native_batch_norm_backward".split())


def elementwise_kernel_time_us(trace: Trace, within: np.ndarray) -> float:
    """GPU time of elementwise, normalization and reduction kernels inside the measured steps."""
    mask = trace.kernels.mask(lambda n: bool(ELEMENTWISE_KERNEL.search(n)) and not GEMM_KERNEL.search(n))
    return iv.total(iv.intersect(iv.union_of(trace.kernels, mask), within))


def elementwise_op_self_us(ops: Spans, self_t: np.ndarray, optimizer: np.ndarray) -> float:
    """Host self time of elementwise, normalization and reduction ops (the CPU runs them itself), outside the
    `optimizer` intervals: an optimizer's update is its own diagnosis (a fused or foreach optimizer)."""
    if not len(ops):
        return 0.0
    mask = ops.mask(lambda n: n.removeprefix("aten::") in ELEMENTWISE_OPS) & ~iv.contains(optimizer, ops.start)
    return float(self_t[mask].sum())


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


def top_ops(ops: Spans, self_t: np.ndarray, limit: int = 15) -> tuple[OpStat, ...]:
    if not len(ops):
        return ()
    codes, uniques = ops.factorized()
    names = present_in_order(codes)  # the names these ops hold, in order of first appearance (ties rank so)
    counts = np.bincount(codes, minlength=len(uniques))[names]
    totals = np.bincount(codes, weights=ops.end - ops.start, minlength=len(uniques))[names]
    selfs = np.bincount(codes, weights=self_t, minlength=len(uniques))[names]
    ranked = np.argsort(-selfs, kind="stable")[:limit]
    return tuple(OpStat(uniques[names[i]], int(counts[i]), float(totals[i]) / 1e6, float(selfs[i]) / 1e6)
                 for i in ranked)


def h2d_pageable_frac(trace: Trace):
    h2d = trace.memcpy.mask(lambda n: "HtoD" in n)
    if not h2d.any():
        return None
    pageable = trace.memcpy.mask(lambda n: "Pageable" in n) & h2d
    durations = trace.memcpy.end - trace.memcpy.start
    return float(durations[pageable].sum() / max(durations[h2d].sum(), 1e-9))


def fp32_gemm_time_us(trace: Trace, within: np.ndarray) -> float:
    """GPU time of fp32 GEMM/convolution kernels without tensor-core markers, inside the measured steps."""
    mask = trace.kernels.mask(lambda n: bool(GEMM_KERNEL.search(n)) and not TENSOR_CORE_KERNEL.search(n))
    return iv.total(iv.intersect(iv.union_of(trace.kernels, mask), within))
