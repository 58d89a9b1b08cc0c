"""GPU-side metrics from a trace: where the GPU idles and what the host did meanwhile, copies by direction and
memory kind, kernel launch cost, host-device syncs and where they come from, communication overlap."""
from __future__ import annotations

from collections import Counter
from typing import Optional

import numpy as np

from diagnose.analysis.frames import FrameSegments
from diagnose.model import SyncSource
from diagnose.trace import SYNC_RUNTIME, Spans, Trace, is_communication, present_in_order
from diagnose.trace import intervals as iv

LAUNCH_RUNTIME = ("cudaLaunchKernel", "cudaLaunchKernelExC", "cudaLaunchCooperativeKernel", "cudaGraphLaunch",
                  "cuLaunchKernel", "cuLaunchKernelEx", "hipLaunchKernel", "hipExtModuleLaunchKernel",
                  "hipModuleLaunchKernel", "hipGraphLaunch")
SYNC_COPY_RUNTIME = ("cudaMemcpy", "hipMemcpy", "hipMemcpyWithStream")  # synchronous copies block the host
# an "async" copy into pageable host memory returns only once the copy is done (CUDA's API sync behaviour),
# after everything queued before it: as blocking as a cudaMemcpy
ASYNC_COPY_RUNTIME = ("cudaMemcpyAsync", "hipMemcpyAsync", "cuMemcpyAsync", "cuMemcpyDtoHAsync_v2")
SYNC_OPS = ("aten::item", "aten::_local_scalar_dense", "aten::nonzero", "aten::is_nonzero")


def gpu_activity(trace: Trace) -> np.ndarray:
    """Times when the GPU runs anything: kernels on any stream, copies, memsets."""
    return iv.union(np.vstack([iv.union_of(trace.kernels), iv.union_of(trace.memcpy), iv.union_of(trace.memset)]))


def blocking_runtime(trace: Trace) -> np.ndarray:
    """Which runtime calls block the host until the GPU catches up: explicit syncs, synchronous copies, and async
    copies into pageable memory (known by a device-to-pageable copy that starts and ends inside the call)."""
    runtime = trace.runtime
    blocking = runtime.mask(lambda n: n in SYNC_RUNTIME or n in SYNC_COPY_RUNTIME)
    to_pageable = trace.memcpy.mask(lambda n: "DtoH" in n and "Pageable" in n)
    if not to_pageable.any():
        return blocking
    order = np.argsort(trace.memcpy.start[to_pageable], kind="stable")
    starts, ends = trace.memcpy.start[to_pageable][order], trace.memcpy.end[to_pageable][order]
    first = np.searchsorted(starts, runtime.start, side="left")  # the first such copy issued after the call began
    inside = (first < len(starts)) & (ends[np.minimum(first, len(starts) - 1)] <= runtime.end)
    return blocking | (runtime.mask(lambda n: n in ASYNC_COPY_RUNTIME) & inside)


def sync_points(trace: Trace) -> np.ndarray:
    """Blocking calls counted as the syncs a user wrote: .item() and .cpu() are a blocking copy followed at once by
    a stream sync on the same thread (memcpy_and_sync); that pair is one sync, not two."""
    blocking = blocking_runtime(trace)
    runtime = trace.runtime
    copies = blocking & runtime.mask(lambda n: n in ASYNC_COPY_RUNTIME or n in SYNC_COPY_RUNTIME)
    if not copies.any():
        return blocking
    waits = runtime.mask(lambda n: n in SYNC_RUNTIME)
    points = blocking.copy()
    previous: dict = {}
    threads = runtime.thread_codes_.tolist()
    for i in np.argsort(runtime.start, kind="stable").tolist():
        tid = threads[i]
        if waits[i] and copies[previous.get(tid, i)] and previous.get(tid, i) != i:
            points[i] = False
        previous[tid] = i
    return points


def idle_attribution(trace: Trace, windows: np.ndarray, total_us: float) -> dict[str, float]:
    """Share of step time the GPU idles, split by what the host's main process was doing meanwhile: waiting for
    the DataLoader, waiting in a sync, launching work, running torch ops on the CPU, or none of those (Python)."""
    idle = iv.subtract(iv.union(windows), gpu_activity(trace))
    result = {"gpu_idle_frac": iv.total(idle) / total_us}
    sources = [  # made one at a time: a big trace's ops and runtime calls take hundreds of MB as intervals
        ("data_wait", lambda: iv.union_of(trace.dataloader)),
        ("sync", lambda: _sync_time(trace)),
        ("runtime", lambda: iv.union_of(trace.runtime)),
        ("cpu_ops", lambda: iv.union_of(trace.cpu_ops)),
    ]
    remaining = idle
    for cause, covered in sources:
        mine = iv.intersect(remaining, covered())
        result[f"gpu_idle_{cause}_frac"] = iv.total(mine) / total_us
        remaining = iv.subtract(remaining, mine)
    result["gpu_idle_python_frac"] = iv.total(remaining) / total_us
    result["gpu_idle_after_sync_frac"] = _gaps_after_syncs(trace, idle) / total_us
    return result


def _sync_time(trace: Trace) -> np.ndarray:
    """When the host waits in a sync: blocking runtime calls, and the ops that sync (.item(), nonzero)."""
    ops = trace.cpu_ops
    return iv.union(np.vstack([iv.union_of(trace.runtime, blocking_runtime(trace)),
                               iv.union_of(ops, ops.mask(lambda n: n in SYNC_OPS))]))


def _gaps_after_syncs(trace: Trace, idle: np.ndarray) -> float:
    """Length of the GPU idle gaps a sync opened: a sync returns once the GPU has drained its queue, so the gap
    that follows (until the host launches again) contains the sync's end."""
    ends = np.sort(trace.runtime.end[blocking_runtime(trace)])
    if not len(ends) or not len(idle):
        return 0.0
    first = np.searchsorted(ends, idle[:, 0], side="left")
    opened = (first < len(ends)) & (ends[np.minimum(first, len(ends) - 1)] <= idle[:, 1])
    return float((idle[opened, 1] - idle[opened, 0]).sum())


def copy_metrics(trace: Trace, within: np.ndarray, host_within: np.ndarray, total_us: float,
                 n_steps: int) -> dict[str, Optional[float]]:
    """Copy time by direction (share of step time, overlapping copies counted once) and pageable copies. `within`:
    the steps on the device timeline; `host_within`: the same steps on the host, where the calls are made."""
    names = trace.memcpy.names

    def direction(*markers: str) -> np.ndarray:
        return np.fromiter((any(m in n for m in markers) for n in names), dtype=bool, count=len(names))

    h2d, d2h, d2d = direction("HtoD", "Host to Device"), direction("DtoH", "Device to Host"), direction("DtoD", "PtoP")
    pageable = direction("Pageable")
    in_steps = iv.contains(within, trace.memcpy.start)

    def share(intervals: np.ndarray) -> float:
        return iv.total(iv.intersect(iv.union(intervals), within)) / total_us

    return {
        "h2d_copy_frac": share(trace.memcpy.intervals(h2d)),
        "d2h_copy_frac": share(trace.memcpy.intervals(d2h)),
        "d2d_copy_frac": share(trace.memcpy.intervals(d2d)),
        "memset_frac": share(trace.memset.intervals()),
        "h2d_gpu_share": share(trace.memcpy.intervals(h2d)) / max(share(gpu_activity(trace)), 1e-12),
        "pageable_h2d_per_step": float((h2d & pageable & in_steps).sum()) / n_steps,
        "pageable_d2h_per_step": float((d2h & pageable & in_steps).sum()) / n_steps,
        "sync_copies_per_step": float((sync_points(trace) & ~trace.runtime.mask(lambda n: n in SYNC_RUNTIME)
                                       & iv.contains(host_within, trace.runtime.start)).sum()) / n_steps,
    }


def launch_metrics(trace: Trace, within: np.ndarray, host_within: np.ndarray,
                   n_steps: int) -> dict[str, Optional[float]]:
    """How many kernels a step launches, how long they run, and how long launching one takes on the host
    (medians: one 30 s cudaLaunchKernel that waited on lazy module loading says nothing about the others)."""
    in_steps = iv.contains(within, trace.kernels.start)
    if not in_steps.any():
        return {"kernels_per_step": 0.0, "kernel_mean_us": None, "launch_to_kernel_ratio": None}
    durations = (trace.kernels.end - trace.kernels.start)[in_steps]
    launches = trace.runtime.mask(lambda n: n in LAUNCH_RUNTIME) & iv.contains(host_within, trace.runtime.start)
    launch_us = (trace.runtime.end - trace.runtime.start)[launches]
    return {
        "kernels_per_step": float(in_steps.sum()) / n_steps,
        "kernel_mean_us": float(durations.mean()),
        "launch_to_kernel_ratio": (float(np.median(launch_us) / max(np.median(durations), 1e-3))
                                   if len(launch_us) else None),
    }


def communication_metrics(trace: Trace, within: np.ndarray, total_us: float) -> dict[str, Optional[float]]:
    """Collectives: the share of step time a rank spends in them (host ops of gloo, or GPU kernels of NCCL, which
    wait there for the slowest rank), and for kernels how much of them ran while compute kernels ran too."""
    comm_mask = trace.kernels.mask(is_communication)
    comm_ops = trace.cpu_ops.mask(is_communication)
    comm_annotations = trace.annotations.mask(is_communication)  # gloo:all_reduce on the backend's threads
    result: dict[str, Optional[float]] = {"comm_kernel_frac": None, "comm_overlap_frac": None,
                                          "collective_wait_frac": None}
    if comm_ops.any() or comm_mask.any() or comm_annotations.any():
        every = np.vstack([trace.kernels.intervals(comm_mask), trace.cpu_ops.intervals(comm_ops),
                           trace.annotations.intervals(comm_annotations)])
        result["collective_wait_frac"] = iv.total(iv.intersect(iv.union(every), within)) / total_us
    if comm_mask.any():
        comm = iv.intersect(iv.union_of(trace.kernels, comm_mask), within)
        compute = iv.union_of(trace.kernels, ~comm_mask)
        comm_total = iv.total(comm)
        result["comm_kernel_frac"] = comm_total / total_us
        result["comm_overlap_frac"] = iv.total(iv.intersect(comm, compute)) / comm_total if comm_total else None
    return result


def sync_sources(trace: Trace, top: np.ndarray, n_steps: int, frames: FrameSegments,
                 limit: int = 8) -> tuple[SyncSource, ...]:
    """Each blocking sync (cuda*Synchronize, synchronous cudaMemcpy) named by the top-level torch op it ran in
    (aten::item, aten::to...) and, when the trace has Python frames, the user's line that called it."""
    picks = np.flatnonzero(sync_points(trace)).tolist()
    if not picks:
        return ()
    syncs = trace.runtime.take(np.asarray(picks))
    at, threads = syncs.start, syncs.tids
    ops = _outermost_enclosing(trace.cpu_ops, top, at, threads)
    lines = _user_location_at(frames, at, [t == trace.main_thread for t in threads])
    counts = Counter(zip(syncs.names, ops, lines))
    return tuple(SyncSource(call, op or "", line or "", count / n_steps)
                 for (call, op, line), count in counts.most_common(limit))


def _outermost_enclosing(spans: Spans, top: np.ndarray, at: np.ndarray, threads: list) -> list[Optional[str]]:
    """Name of the top-level span (top: as self_times found them) on the same thread that contains each time."""
    result: list[Optional[str]] = [None] * len(at)
    tops = np.flatnonzero(top)
    codes, table = spans.thread_codes()
    for code in present_in_order(codes[tops]).tolist():
        idx = tops[codes[tops] == code]
        order = idx[np.argsort(spans.start[idx], kind="stable")]
        _assign(result, spans, order, at, threads, table[code])
    return result


def _user_location_at(frames: FrameSegments, at: np.ndarray, on_main: list[bool]) -> list[Optional[str]]:
    """path:line of the user's innermost function around each (main-thread) time, from with_stack frames."""
    if not len(frames):
        return [None] * len(at)
    i = np.searchsorted(frames.intervals[:, 0], at, side="right") - 1
    inside = (i >= 0) & (at < frames.intervals[np.clip(i, 0, None), 1])
    return [frames.locations[k] or None if ok and main else None
            for k, ok, main in zip(i.tolist(), inside.tolist(), on_main)]


def _assign(result: list, spans: Spans, tops: np.ndarray, at: np.ndarray, threads: list, tid) -> None:
    if not len(tops):
        return
    starts, ends = spans.start[tops], spans.end[tops]
    for k, t in enumerate(threads):
        if t != tid:
            continue
        j = int(np.searchsorted(starts, at[k], side="right")) - 1
        if j >= 0 and ends[j] >= at[k]:
            result[k] = spans.name(int(tops[j]))
