"""Launches and GPU time by phase of the step: data (copies in), forward, backward, optimizer, other.

A launch is put in a phase by where the host made it: inside `Optimizer.step#` / `Optimizer.zero_grad#`
(optimizer), on autograd's engine (backward: its device thread, or inside `evaluate_function` ops), inside the
DataLoader's `next()` or as a host-to-device copy (data), before the step's first backward launch (forward), or
after it (other: loss logging, clipping, metrics). Device work is linked to its launch by correlation id.
"""
from __future__ import annotations

import numpy as np

from diagnose.analysis.timeline import StepTimeline
from diagnose.model import PHASES, PhaseStat
from diagnose.trace import Trace, from_launch_each, threads_where
from diagnose.trace import intervals as iv

LAUNCH_PREFIXES = ("cudaLaunch", "cuLaunch", "hipLaunch", "hipExtModuleLaunch", "hipModuleLaunch", "cudaGraphLaunch",
                   "hipGraphLaunch", "cudaMemcpy", "cuMemcpy", "hipMemcpy", "cudaMemset", "cuMemset", "hipMemset")
OPTIMIZER_MARKS = ("Optimizer.step#", "Optimizer.zero_grad#")
BACKWARD_OP = "autograd::engine::evaluate_function"


def is_launch(name: str) -> bool:
    """Runtime calls that put work on the device (kernels, copies, memsets), not queries or syncs."""
    return name.startswith(LAUNCH_PREFIXES) and "Synchronize" not in name


def phase_stats(trace: Trace, timeline: StepTimeline) -> tuple[PhaseStat, ...]:
    n = len(timeline.host)
    if not n or not trace.has_gpu:
        return ()
    runtime = trace.runtime
    launches = runtime.mask(is_launch) & iv.contains(iv.union(timeline.host), runtime.start)
    phase = launch_phases(trace, timeline.host)
    kinds = [trace.kernels, trace.memcpy, trace.memset]  # each kind as it is: joined, a big trace's kernels copied
    phase_of = from_launch_each(trace, kinds, phase)
    within = iv.union(timeline.device)
    stats = []
    for index, name in enumerate(PHASES):
        mine = [of == index for of in phase_of]
        covered = iv.union(np.vstack([iv.union_of(spans, picked) for spans, picked in zip(kinds, mine)]))
        busy = iv.total(iv.intersect(covered, within))
        stats.append(PhaseStat(name, float((launches & (phase == index)).sum()) / n,
                               float(sum(int(picked.sum()) for picked in mine)) / n, busy / 1e6 / n))
    return tuple(stats)


def launch_phases(trace: Trace, host: np.ndarray) -> np.ndarray:
    """Index into PHASES of each runtime call's phase."""
    runtime = trace.runtime
    return point_phases(trace, runtime.start, runtime.thread_codes(), host, _copies_in(trace))


def point_phases(trace: Trace, at: np.ndarray, threads: tuple[np.ndarray, list], host: np.ndarray,
                 data_extra=None) -> np.ndarray:
    """Index into PHASES of host events at times `at` on `threads` (codes and the threads they index, as
    Spans.thread_codes gives them) (launches, allocations): inside the
    DataLoader's next() (data), made by autograd's engine (backward), inside an optimizer step, before the step's
    first backward event (forward), or after it (other)."""
    phase = np.full(len(at), PHASES.index("forward"))
    backward = _by_engine(trace, at, threads)
    _after_backward_is_other(phase, at, backward, host)
    data = iv.contains(iv.union_of(trace.dataloader), at)
    if data_extra is not None:
        data = data | data_extra
    phase[data] = PHASES.index("data")
    phase[backward] = PHASES.index("backward")
    phase[iv.contains(optimizer_intervals(trace), at)] = PHASES.index("optimizer")
    return phase


def optimizer_intervals(trace: Trace) -> np.ndarray:
    marks = trace.annotations.mask(lambda n: n.startswith(OPTIMIZER_MARKS))
    return iv.union_of(trace.annotations, marks)


def _by_engine(trace: Trace, at: np.ndarray, threads: tuple[np.ndarray, list]) -> np.ndarray:
    """Events made by autograd's engine: on a thread of its own (CUDA backward), or inside its evaluate_function."""
    ops = trace.cpu_ops
    engine = ops.mask(lambda n: n.startswith(BACKWARD_OP))
    engine_threads = set(ops.threads_present(engine)) - {trace.main_thread}
    on_engine_thread = threads_where(threads, lambda t: t in engine_threads)
    main_engine = engine & ops.thread_mask(lambda t: t == trace.main_thread)
    return on_engine_thread | iv.contains(iv.union_of(ops, main_engine), at)


def _after_backward_is_other(phase: np.ndarray, at: np.ndarray, backward: np.ndarray, host: np.ndarray) -> None:
    """Calls after a step's first backward launch that are not backward or optimizer: logging, clipping, metrics."""
    if not len(host) or not backward.any():
        return
    step = np.searchsorted(host[:, 0], at, side="right") - 1
    first = np.full(len(host), np.inf)
    inside = (step >= 0) & backward
    np.minimum.at(first, step[inside], at[inside])
    after = (step >= 0) & (at >= first[np.clip(step, 0, None)])
    phase[after] = PHASES.index("other")


def _copies_in(trace: Trace) -> np.ndarray:
    """Runtime calls whose device work is a host-to-device copy: the batch moving to the GPU."""
    h2d = trace.memcpy.mask(lambda n: "HtoD" in n or "Host to Device" in n)
    ids = trace.memcpy.correlations()[h2d]
    ids = ids[ids >= 0]
    return np.isin(trace.runtime.correlations(), ids) & (trace.runtime.correlations() >= 0)


def optimizer_metrics(trace: Trace, timeline: StepTimeline, phases: tuple[PhaseStat, ...], capture) -> dict:
    """How much of the step the optimizer's launches make up, and whether it was built per-parameter."""
    launches = sum(p.launches_per_step for p in phases)
    optimizer = next((p for p in phases if p.phase == "optimizer"), None)
    total_us = iv.total(timeline.device)
    host_us = iv.total(iv.intersect(optimizer_intervals(trace), iv.union(timeline.host)))
    first = capture.optimizers[0] if capture is not None and capture.optimizers else None
    return {
        "launches_per_step": launches if phases else None,
        "optimizer_launch_frac": optimizer.launches_per_step / launches if optimizer and launches else None,
        "optimizer_host_frac": host_us / total_us if phases and total_us else None,
        "optimizer_multi_tensor": _multi_tensor(first),
    }


def _multi_tensor(optimizer) -> float | None:
    """1: fused or foreach kernels asked for; 0: foreach=False (one kernel per parameter and op); None: unknown or
    left to torch's default (foreach on CUDA when it can)."""
    if optimizer is None:
        return None
    if optimizer.fused or optimizer.foreach:
        return 1.0
    return 0.0 if optimizer.foreach is False else None
