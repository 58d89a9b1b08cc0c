"""Each device event's launch: the runtime call with its correlation id (as the trace's flow events link them),
looked up by a sorted search, or on a big trace by one compiled pass (key_join.py)."""
from __future__ import annotations

import numpy as np

from diagnose.trace import jitscan
from diagnose.trace.intervals import NO_ORDER
from diagnose.trace.load import Trace
from diagnose.trace.spans import Spans


def from_launch(trace: Trace, work: Spans, values: np.ndarray, missing: int = -1) -> np.ndarray:
    """For each device event, values[i] of the runtime call i that launched it (by correlation id)."""
    return from_launch_each(trace, [work], values, missing)[0]


def from_launch_each(trace: Trace, works: list[Spans], values: np.ndarray, missing: int = -1) -> list[np.ndarray]:
    """from_launch for each kind of device work in `works`, the runtime's correlation ids sorted once."""
    corr = trace.runtime.correlations()
    linked = corr >= 0
    if not linked.any():
        return [np.full(len(work), missing) for work in works]
    values = np.asarray(values)
    if len(values) != len(corr) or not np.issubdtype(values.dtype, np.integer):
        raise ValueError("from_launch takes one integer value per runtime call")
    kernels = jitscan.for_size(sum(len(work) for work in works))
    if kernels is not None:  # a big trace: one pass, holding the sort order and the result only
        values = values.astype(np.int64, copy=False)
        order = NO_ORDER if kernels.ascending(corr, NO_ORDER) else np.argsort(corr, kind="stable")
        return [_looked_up(kernels, corr, order, values, work.correlations(), missing) for work in works]
    order = np.argsort(corr[linked], kind="stable")
    keys, picked = corr[linked][order], np.asarray(values)[linked][order]
    return [_searched(keys, picked, work.correlations(), missing) for work in works]


def _looked_up(kernels, corr: np.ndarray, order: np.ndarray, values: np.ndarray, mine: np.ndarray,
               missing: int) -> np.ndarray:
    out = np.empty(len(mine), dtype=np.int64)
    kernels.values_by_key(corr, order, values, mine, np.int64(missing), out)
    return out


def _searched(keys: np.ndarray, picked: np.ndarray, mine: np.ndarray, missing: int) -> np.ndarray:
    if not len(mine):
        return np.full(0, missing)
    j = np.clip(np.searchsorted(keys, mine), 0, len(keys) - 1)
    return np.where((mine >= 0) & (keys[j] == mine), picked[j], missing)
