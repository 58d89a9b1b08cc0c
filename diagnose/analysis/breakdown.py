"""Per-step exclusive accounting: every microsecond of a step lands in exactly one bucket.

Priority (torch-tb-profiler's idea, with our bucket names): GPU kernels (compute) > host-to-device copies
(h2d) > communication > other GPU activity (memsets, other copies) > DataLoader wait (data_wait) > CPU ops
(compute, on CPU-only runs) > everything else (host_overhead: Python, logging, sleeps, time outside any torch
op; on GPU runs also the CPU side of torch ops while the GPU idles, as that is time the host keeps it waiting).
Collectives that a backend runs on its own threads (gloo's `gloo:all_reduce` annotations) count as
communication below the training thread's own ops: while it computes, they are hidden.
"""
from __future__ import annotations

import numpy as np
import numpy.ma  # noqa: F401  np.percentile's first call imports it (6 ms): here, while the trace parses

from diagnose.model import BUCKETS, StepBreakdown
from diagnose.trace import Trace, is_communication
from diagnose.trace import intervals as iv

PINNED_THREAD_OPS = ("aten::pin_memory", "aten::_pin_memory", "aten::is_pinned", "aten::empty")


def host_steps(trace: Trace) -> np.ndarray:
    """The steps as the host marked them: (start, end) in us, one row a step."""
    return trace.steps.intervals()


def compute_threads(trace: Trace) -> set:
    """Threads whose CPU ops are training work: the main thread and autograd threads, not pin-memory threads."""
    ops = trace.cpu_ops
    working = ops.threads_present(~ops.mask(lambda n: n in PINNED_THREAD_OPS))
    return set(working) | ({trace.main_thread} & set(ops.threads_present()))


def bucket_sources(trace: Trace) -> list[tuple[str, np.ndarray]]:
    """(bucket, raw intervals) in priority order."""
    kernel_comm = trace.kernels.mask(is_communication)
    memcpy_h2d = trace.memcpy.mask(lambda n: "HtoD" in n or "Host to Device" in n)
    threads = compute_threads(trace)
    cpu_mask = trace.cpu_ops.thread_mask(lambda t: t in threads)
    cpu_comm = trace.cpu_ops.mask(is_communication)
    sources = [
        ("compute", trace.kernels.intervals(~kernel_comm)),
        ("h2d", trace.memcpy.intervals(memcpy_h2d)),
        ("communication", np.vstack([trace.kernels.intervals(kernel_comm),
                                     trace.cpu_ops.intervals(cpu_mask & cpu_comm)])),
        ("other", np.vstack([trace.memcpy.intervals(~memcpy_h2d), trace.memset.intervals()])),
        ("data_wait", trace.dataloader.intervals()),
    ]
    if not trace.has_gpu:
        sources.append(("compute", trace.cpu_ops.intervals(cpu_mask & ~cpu_comm)))
    # collectives the backend runs on its own threads (gloo:all_reduce...): the training thread waits for them
    # unless it computes meanwhile, so they rank below its own ops
    sources.append(("communication", trace.annotations.intervals(trace.annotations.mask(is_communication))))
    return sources


def exclusive_buckets(trace: Trace, steps: np.ndarray) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """Disjoint intervals per bucket inside the given steps, and the host_overhead remainder."""
    in_steps = iv.union(steps)
    claimed = iv.EMPTY
    result: dict[str, list[np.ndarray]] = {b: [] for b in BUCKETS}
    for bucket, raw in bucket_sources(trace):
        mine = iv.subtract(iv.intersect(iv.union(raw), in_steps), claimed)
        result[bucket].append(mine)
        claimed = iv.union(np.vstack([claimed, mine]))
    merged = {b: iv.union(np.vstack(parts)) if parts else iv.EMPTY for b, parts in result.items()}
    merged["host_overhead"] = iv.subtract(in_steps, claimed)
    return merged, in_steps


def per_step(buckets: dict[str, np.ndarray], steps: np.ndarray) -> list[StepBreakdown]:
    if len(steps) == 0:
        return []
    per_bucket = {b: iv.measure_within(buckets[b], steps) / 1e6 for b in BUCKETS}
    first = steps[0, 0]
    return [
        StepBreakdown(
            index=i,
            start_s=float((steps[i, 0] - first) / 1e6),
            duration_s=float((steps[i, 1] - steps[i, 0]) / 1e6),
            buckets_s={b: float(per_bucket[b][i]) for b in BUCKETS},
        )
        for i in range(len(steps))
    ]


def breakdown_fractions(steps: list[StepBreakdown]) -> dict[str, float]:
    total = sum(s.duration_s for s in steps)
    if total <= 0:
        return {b: 0.0 for b in BUCKETS}
    fractions = {b: sum(s.buckets_s[b] for s in steps) / total for b in BUCKETS}
    fractions["host_overhead"] = max(0.0, 1.0 - sum(v for b, v in fractions.items() if b != "host_overhead"))
    return fractions


def step_stats(steps: list[StepBreakdown]) -> dict[str, float]:
    durations = np.array([s.duration_s for s in steps])
    if len(durations) == 0:
        return {"mean": 0.0, "p50": 0.0, "p95": 0.0}
    return {
        "mean": float(durations.mean()),
        "p50": float(np.percentile(durations, 50)),
        "p95": float(np.percentile(durations, 95)),
    }
