"""Vectorised interval arithmetic on (N, 2) float arrays of [start, end) in microseconds.

Every function returns disjoint intervals sorted by start, so results compose. Once a big trace has loaded numba
(jitscan.loaded()), union, intersect and subtract over many intervals run as compiled passes (interval_sweeps.py):
the same results, in a fraction of the memory numpy's forms take.
"""
from __future__ import annotations

from typing import Optional

import numpy as np

from diagnose.trace import jitscan

EMPTY = np.zeros((0, 2), dtype=np.float64)


def union(a: np.ndarray) -> np.ndarray:
    if len(a) == 0:
        return EMPTY
    kernels = jitscan.for_size(len(a))
    if kernels is not None:
        a = np.ascontiguousarray(a, dtype=np.float64)
        return _union_pass(kernels, a[:, 0], a[:, 1], None)
    a = a[np.argsort(a[:, 0], kind="stable")]
    running_end = np.maximum.accumulate(a[:, 1])
    # a new block starts where an interval begins after everything before it has ended
    new_block = np.empty(len(a), dtype=bool)
    new_block[0] = True
    new_block[1:] = a[1:, 0] > running_end[:-1]
    starts = a[new_block, 0]
    ends = running_end[np.r_[np.flatnonzero(new_block)[1:] - 1, len(a) - 1]]  # each block's last running end
    return np.column_stack([starts, ends])


def union_of(spans, mask: Optional[np.ndarray] = None) -> np.ndarray:
    """union(spans.intervals(mask)): on a big trace, straight from the spans' start and end arrays, without
    stacking them into a copy first (16 bytes a span: 200 MB for a 10 GB trace's ops)."""
    count = len(spans.start) if mask is None else int(np.count_nonzero(mask))
    kernels = jitscan.for_size(count)
    if kernels is None or count == 0:  # (the pass takes an empty order for "every span")
        return union(spans.intervals(mask))
    if mask is not None and (mask.dtype != bool or len(mask) != len(spans.start)):  # the pass reads unchecked
        raise ValueError("union_of takes a boolean mask as long as the spans")
    picks = None if mask is None else np.flatnonzero(mask)
    return _union_pass(kernels, np.ascontiguousarray(spans.start), np.ascontiguousarray(spans.end), picks)


def _union_pass(kernels, starts: np.ndarray, ends: np.ndarray, picks: Optional[np.ndarray]) -> np.ndarray:
    """The union by the compiled pass over (starts[i], ends[i]) for i in `picks` (None: all), sorted by start as
    numpy's stable sort would (no sort when they are in order already)."""
    order = NO_ORDER if picks is None else picks
    if not kernels.ascending(starts, order):
        order = np.argsort(starts, kind="stable") if picks is None else picks[np.argsort(starts[picks], kind="stable")]
    out = np.empty((len(starts) if picks is None else len(picks), 2))  # mapped lazily: pages touched as filled
    return out[:kernels.union_into(starts, ends, order, out)].copy()


NO_ORDER = np.zeros(0, dtype=np.intp)  # what the compiled passes take for "every item, as they are"


def _swept(a: np.ndarray, b: np.ndarray, without_b: bool):
    """intersect (subtract: `without_b`) by the compiled sweep; None where it does not apply (few intervals, no
    kernels loaded, or inputs that are not sorted and disjoint, which numpy's form takes as they are)."""
    kernels = jitscan.for_size(len(a) + len(b))
    if kernels is None:
        return None
    a, b = np.ascontiguousarray(a, dtype=np.float64), np.ascontiguousarray(b, dtype=np.float64)
    if not (kernels.is_chain(a) and kernels.is_chain(b)):
        return None
    out = np.empty((len(a) + len(b), 2))
    return out[:kernels.coverage_into(a, b, without_b, out)].copy()


def _coverage(a: np.ndarray, b: np.ndarray, keep) -> np.ndarray:
    """Intervals where keep(in_a, in_b) holds; a and b must each be disjoint."""
    points = np.concatenate([a[:, 0], a[:, 1], b[:, 0], b[:, 1]])
    delta_a = np.concatenate([np.ones(len(a)), -np.ones(len(a)), np.zeros(2 * len(b))])
    delta_b = np.concatenate([np.zeros(2 * len(a)), np.ones(len(b)), -np.ones(len(b))])
    order = np.argsort(points, kind="stable")
    points, in_a, in_b = points[order], np.cumsum(delta_a[order]), np.cumsum(delta_b[order])
    inside = keep(in_a > 0.5, in_b > 0.5)[:-1]
    result = np.column_stack([points[:-1][inside], points[1:][inside]])
    return union(result[result[:, 1] > result[:, 0]])


def intersect(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    if len(a) == 0 or len(b) == 0:
        return EMPTY
    swept = _swept(a, b, without_b=False)
    return swept if swept is not None else _coverage(a, b, lambda x, y: x & y)


def subtract(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    if len(a) == 0 or len(b) == 0:
        return a
    swept = _swept(a, b, without_b=True)
    return swept if swept is not None else _coverage(a, b, lambda x, y: x & ~y)


def total(a: np.ndarray) -> float:
    return float((a[:, 1] - a[:, 0]).sum()) if len(a) else 0.0


def measure_within(a: np.ndarray, windows: np.ndarray) -> np.ndarray:
    """Covered length of disjoint `a` inside each window (row of `windows`), vectorised with prefix sums."""
    if len(a) == 0:
        return np.zeros(len(windows))
    prefix = np.concatenate([[0.0], np.cumsum(a[:, 1] - a[:, 0])])

    def covered_before(t: np.ndarray) -> np.ndarray:
        i = np.searchsorted(a[:, 0], t, side="right")  # intervals starting at or before t
        last = np.clip(i - 1, 0, len(a) - 1)
        partial = np.where(i > 0, np.clip(t - a[last, 0], 0, a[last, 1] - a[last, 0]), 0.0)
        return prefix[np.maximum(i - 1, 0)] * (i > 0) + partial

    return covered_before(windows[:, 1]) - covered_before(windows[:, 0])


def contains(a: np.ndarray, points: np.ndarray) -> np.ndarray:
    """Boolean mask: which points fall inside disjoint intervals `a`."""
    if len(a) == 0:
        return np.zeros(len(points), dtype=bool)
    i = np.searchsorted(a[:, 0], points, side="right") - 1
    ok = i >= 0
    return ok & (points < a[np.clip(i, 0, None), 1])
