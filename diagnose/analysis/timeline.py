"""Steps on the device timeline.

CUDA is asynchronous: the host enqueues a step's kernels and moves on. In a GPU-bound loop with no sync the
host runs a launch queue ahead, so host-side step spans (`ProfilerStep#`, `next()`) measure how fast the host
enqueues, not how fast training runs. A step ends at the later of its host end and the end of the device work
it launched (kernels, copies, memsets, linked to their launch calls by correlation id, as the trace's flow
events link them), and begins where the step before it ended.
"""
from __future__ import annotations

import numpy as np

from diagnose.lean_dataclass import dataclass
from diagnose.trace import Spans, Trace, from_launch


@dataclass(frozen=True)
class StepTimeline:
    host: np.ndarray  # (N, 2) host-side step spans, us: where host events are counted
    device: np.ndarray  # (N, 2) the steps' spans on the device timeline, us: where time is accounted
    linked: bool  # device work could be linked to the steps that launched it

    def steps(self, first: int, stop: int) -> "StepTimeline":
        return StepTimeline(self.host[first:stop], self.device[first:stop], self.linked)

    @property
    def host_ran_ahead(self) -> bool:
        """The steps take clearly longer on the device than the host took to enqueue them (a lag alone, with the
        host keeping pace, is not it)."""
        if not len(self.host):
            return False
        host = float((self.host[:, 1] - self.host[:, 0]).mean())
        device = float((self.device[:, 1] - self.device[:, 0]).mean())
        return device > 1.1 * host


def device_work(trace: Trace) -> Spans:
    """Everything the device ran, one Spans: kernels, copies, memsets."""
    return Spans.concat([trace.kernels, trace.memcpy, trace.memset])


def launch_step(trace: Trace, host: np.ndarray) -> np.ndarray:
    """Index of the host step each runtime call was made in; -1 outside every step."""
    start = trace.runtime.start
    if not len(host):
        return np.full(len(start), -1)
    i = np.searchsorted(host[:, 0], start, side="right") - 1
    inside = (i >= 0) & (start < host[np.clip(i, 0, None), 1])
    return np.where(inside, i, -1)


def device_step_of(trace: Trace, work: Spans, host: np.ndarray) -> np.ndarray:
    """For each device event, the host step that launched it (-1: launched outside the steps, or unlinked)."""
    return from_launch(trace, work, launch_step(trace, host))


def step_timeline(trace: Trace, host: np.ndarray) -> StepTimeline:
    host = np.asarray(host, dtype=np.float64).reshape(-1, 2)
    if not len(host) or not trace.has_gpu:
        return StepTimeline(host, host.copy(), False)
    work = device_work(trace)
    owner = device_step_of(trace, work, host)
    if not (owner >= 0).any():
        return StepTimeline(host, host.copy(), False)
    device_end = np.full(len(host), -np.inf)
    np.maximum.at(device_end, owner[owner >= 0], work.end[owner >= 0])
    ends = np.maximum(host[:, 1], device_end)
    starts = host[:, 0].copy()
    starts[0] = max(starts[0], _carried_in_end(work, owner, host))
    starts[0] = max(starts[0], _first_start_without_fill(host, ends))
    ends[0] = max(ends[0], starts[0])
    for i in range(1, len(host)):  # a step starts once the one before it has ended, on the host and the device
        starts[i] = max(starts[i], ends[i - 1])
        ends[i] = max(ends[i], starts[i])  # a step that launched nothing (or whose work was not recorded): empty
    return StepTimeline(host, np.column_stack([starts, ends]), True)


def _first_start_without_fill(host: np.ndarray, ends: np.ndarray) -> float:
    """Where the first step would have begun with the launch queue already as full as in the steps after it.
    When the device lags the host, the first step's span would also hold the queue's filling (the lag itself),
    which a long training run pays once, not per step: the first step is given the length of a typical step
    (the median of the others), or its own host length when that is longer (a step that is slow on the host)."""
    if len(host) < 2 or ends[0] <= host[0, 1]:
        return float(host[0, 0])
    typical = float(np.median(np.diff(ends)))
    return float(ends[0] - max(typical, host[0, 1] - host[0, 0]))


def _carried_in_end(work: Spans, owner: np.ndarray, host: np.ndarray) -> float:
    """When the device finished work queued before the first step (warm-up steps the profiler did not record):
    until then the device belongs to the steps before the window, not to the first one."""
    own = owner == 0
    if not own.any():
        return float(host[0, 0])
    first_own = float(work.start[own].min())
    earlier = (owner < 0) & (work.start < first_own) & (work.end > host[0, 0])
    return float(min(work.end[earlier].max(), first_own)) if earlier.any() else float(host[0, 0])
