"""The part of a host-computed step that does not grow with the batch: what a larger batch spreads over more
samples, and so the most it can give back per sample.

Three parts, measured on the profiled steps and counted once where they overlap:
- the optimizer's update and zero_grad (its time depends on the parameters, not the batch);
- the host's own work outside any torch op and outside data loading (the loop's Python, torch's hooks);
- the fixed cost every other op pays whatever the size of its tensors (Python binding, dispatcher, autograd
  bookkeeping): the cost of the trace's cheapest ops, which do almost no work, times the ops each top-level op
  runs, and never more than the op took.
On a GPU the host's costs hide behind the device's queue, so this is a host-run measure (None on GPU runs)."""
from __future__ import annotations

from typing import Optional

import numpy as np

from diagnose.trace import Trace
from diagnose.trace import intervals as iv

NEAR_EMPTY_QUANTILE = 10  # percent: the cheapest top-level ops without nested ops stand for an op that does no work


def fixed_cost_metrics(trace: Trace, steady: Trace, top: np.ndarray, host_overhead: np.ndarray,
                       optimizer: np.ndarray, steps_us: float) -> dict[str, Optional[float]]:
    """`steady`: the events inside the steps; `top`: its top-level ops; `host_overhead`: the breakdown's host
    intervals; `optimizer`: optimizer.step()/zero_grad() intervals; `steps_us`: the profiled steps' total."""
    unknown = {"optimizer_frac": None, "op_fixed_us": None, "op_overhead_frac": None, "fixed_step_frac": None}
    if trace.has_gpu or steps_us <= 0 or not top.any():
        return unknown
    ops = steady.cpu_ops
    starts, ends = ops.start, ops.end
    in_optimizer = iv.contains(optimizer, starts)
    loader = ops.mask(lambda n: "DataLoader" in n) | iv.contains(iv.union_of(steady.dataloader), starts)
    nested = _nested_counts(ops, top)
    durations = (ends - starts)[top]
    leaves = durations[(nested == 1) & ~loader[top]]
    candidates = leaves if len(leaves) else durations[~loader[top]]
    if not len(candidates):
        return unknown
    fixed_us = float(np.percentile(candidates, NEAR_EMPTY_QUANTILE))
    others = ~in_optimizer[top] & ~loader[top]
    per_op_us = float(np.minimum(durations[others], fixed_us * nested[others]).sum())
    optimizer_us = iv.total(optimizer)
    per_step_us = iv.total(iv.union(np.vstack([optimizer, host_overhead]))) if len(host_overhead) else optimizer_us
    return {"optimizer_frac": optimizer_us / steps_us, "op_fixed_us": fixed_us,
            "op_overhead_frac": per_op_us / steps_us, "fixed_step_frac": min(1.0, (per_step_us + per_op_us) / steps_us)}


def _nested_counts(ops, top: np.ndarray) -> np.ndarray:
    """For each top-level op, the ops on its thread that start inside it, itself included."""
    counts = np.ones(int(top.sum()), dtype=np.int64)
    codes, _ = ops.thread_codes()
    top_index = np.flatnonzero(top)
    for code in np.unique(codes[top_index]).tolist():
        mine = np.flatnonzero(codes == code)
        starts = np.sort(ops.start[mine])
        picked = np.flatnonzero(codes[top_index] == code)
        first = np.searchsorted(starts, ops.start[top_index[picked]], side="left")
        last = np.searchsorted(starts, ops.end[top_index[picked]], side="left")
        counts[picked] = np.maximum(last - first, 1)
    return counts


def with_loader_fixed(metrics: dict, step_mean_s: float) -> Optional[float]:
    """fixed_step_frac with the DataLoader's per-batch cost added, as a share of the step timed without the profiler
    where that was timed. A loader in the training process waits the batch's items (measured one by one after
    profiling) and then its sampler, fetch call and collate, which do not grow with the batch; with worker
    processes the wait is what the workers did not hide: left out. The profiler's own cost is paid per op it
    records, whatever the batch: the step's work (what grows with the batch) is what the profiled step holds
    beyond its fixed share, less that cost, over the unprofiled step. Taken from the work, not the fixed share:
    against plain runs at 16x the batch (fixed shares 0.98 for tiny_batch.py, about 0.3 for the MLP of
    tests/scripts/calibration_mlp.py) this gave 1.0 and 0.37, taking it from the fixed share 0.86 and 0.15."""
    fixed = metrics.get("fixed_step_frac")
    if fixed is None or step_mean_s <= 0:
        return fixed
    fixed = min(1.0, fixed + _loader_per_batch_s(metrics, step_mean_s) / step_mean_s)
    plain_s = metrics.get("step_time_unprofiled_s")
    if not plain_s or plain_s >= step_mean_s:  # no profiler cost to take out (or the plain window ran slower)
        return fixed
    work_s = max(0.0, (1 - fixed) * step_mean_s - max(0.0, step_mean_s - plain_s))
    return max(0.0, 1 - work_s / plain_s)


def _loader_per_batch_s(metrics: dict, step_mean_s: float) -> float:
    wait, workers = metrics.get("data_wait_frac"), metrics.get("loader_num_workers")
    batch, item_s = metrics.get("loader_batch_size"), metrics.get("dataset_item_s")
    if None in (wait, workers, batch, item_s) or workers > 0:
        return 0.0
    return max(0.0, wait * step_mean_s - batch * item_s)
