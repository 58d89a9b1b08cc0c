"""Analysis: turn a trace (plus the capture's samples and stack samples) into per-step breakdowns and a flat
mapping of named metrics. No formatting happens here."""
from __future__ import annotations

import linecache
import os
from collections import Counter
from dataclasses import dataclass, replace
from typing import Optional

import numpy as np

from diagnose.analysis import gpu
from diagnose.analysis.frames import FrameSegments, innermost_segments
from diagnose.analysis import intervals as iv
from diagnose.analysis import ops as op_stats
from diagnose.analysis.metrics import METRICS
from diagnose.analysis.breakdown import (breakdown_fractions, compute_threads, exclusive_buckets, per_step, step_stats,
                                         step_windows)
from diagnose.analysis.devices import DEFAULT_TENSOR_SPEEDUP, tensor_core_metrics
from diagnose.analysis.phases import optimizer_metrics, phase_stats
from diagnose.analysis.timeline import StepTimeline, step_timeline
from diagnose.analysis.trace import Trace
from diagnose.model import Analysis, Capture, Samples, SourceLine, StackSamples


@dataclass(frozen=True)
class Inputs:
    trace: Trace
    capture: Optional[Capture] = None
    samples: Optional[Samples] = None
    stacks: Optional[StackSamples] = None
    source_roots: tuple[str, ...] = ()  # folders that relative paths in the trace's Python frames may be under


def analyze(inputs: Inputs) -> Analysis:
    trace = inputs.trace
    host_windows = step_windows(trace)
    if inputs.capture is not None and not inputs.capture.last_step_complete and len(host_windows) > 1:
        host_windows = host_windows[:-1]  # the script stopped mid-step: that step's time is not a step time
    timeline = step_timeline(trace, host_windows)
    windows = timeline.device  # time is accounted where the step really ran; host events are counted per host step
    buckets, _ = exclusive_buckets(trace, windows)
    steps = per_step(buckets, windows)
    fractions = breakdown_fractions(steps)
    stats = step_stats(steps)
    steady = within_steps(trace, host_windows)
    self_t, top = op_stats.self_times(steady.cpu_ops, compute_threads(trace))
    frames = innermost_segments(trace.python, trace.main_tid)
    if inputs.stacks is not None:
        host_lines = attribute_host_lines(trace, inputs.stacks, buckets["host_overhead"], len(steps), stats["mean"])
    else:
        host_lines = lines_from_frames(frames, buckets["host_overhead"], len(steps), stats["mean"], inputs.source_roots)
    syncs = gpu.sync_sources(steady, top, len(steps), frames) if trace.has_gpu and steps else ()
    phases = phase_stats(steady, timeline)
    metrics = _metrics(inputs, steady, steps, fractions, stats, top, host_lines, timeline)
    metrics.update(optimizer_metrics(steady, timeline, phases, inputs.capture))
    return Analysis(
        steps=tuple(steps),
        step_time_s={**stats, "unprofiled": unprofiled_step_s(inputs.capture)},
        breakdown=fractions,
        top_ops=op_stats.top_ops(steady.cpu_ops, self_t),
        host_lines=host_lines,
        metrics=metrics,
        locations=_locations(inputs.capture, host_lines, syncs),
        step_definition=trace.step_definition,
        notes=_notes(inputs, steps, from_frames=inputs.stacks is None and bool(host_lines)) + _timeline_notes(timeline),
        syncs=syncs,
        phases=phases,
        framework=inputs.capture.framework if inputs.capture is not None else None,
    )


def within_steps(trace: Trace, windows: np.ndarray) -> Trace:
    """The host-side events that start inside the measured steps: counted per step, they must not include an
    evaluation loop after training, or the step that was cut short."""
    if not len(windows):
        return trace
    within = iv.union(windows)

    def keep(spans):
        return spans.take(np.flatnonzero(iv.contains(within, spans.start)))

    return replace(trace, cpu_ops=keep(trace.cpu_ops), runtime=keep(trace.runtime))


def attribute_host_lines(trace: Trace, stacks: Optional[StackSamples], overhead: np.ndarray, n_steps: int,
                         mean_step_s: float, limit: int = 10) -> tuple[SourceLine, ...]:
    """Share the host-overhead time among the user lines the main thread was on while it happened."""
    if stacks is None or not stacks.t_ns or stacks.sync_mark_ns is None or n_steps == 0:
        return ()
    marks = [s for s, n in zip(trace.annotations.start, trace.annotations.names) if n == "diagnose::clock_sync"]
    if not marks:
        return ()
    offset_us = marks[-1] - stacks.sync_mark_ns / 1000.0
    t_us = np.asarray(stacks.t_ns, dtype=np.float64) / 1000.0 + offset_us
    inside = iv.contains(overhead, t_us)
    in_torch = stacks.in_torch or (False,) * len(stacks.t_ns)
    counts = Counter((loc, bool(lib)) for loc, lib, hit in zip(stacks.location, in_torch, inside) if hit and loc)
    hits = int(inside.sum())
    if not hits:
        return ()
    per_step_s = iv.total(overhead) / 1e6 / n_steps
    lines = []
    for (location, lib), count in counts.most_common(limit):
        seconds = per_step_s * count / hits
        frac = seconds / mean_step_s if mean_step_s else 0.0
        lines.append(SourceLine(location, seconds, frac, _source(location), lib))
    return tuple(lines)


def lines_from_frames(frames: FrameSegments, overhead: np.ndarray, n_steps: int, mean_step_s: float,
                      roots: tuple[str, ...] = (), limit: int = 10) -> tuple[SourceLine, ...]:
    """Host-overhead time under each of the user's functions, from a with_stack trace's Python frames."""
    if not len(frames) or n_steps == 0:
        return ()
    by_location = frames.time_by_location(overhead)
    lines = []
    for (location, lib), us in sorted(by_location.items(), key=lambda kv: -kv[1])[:limit]:
        seconds = us / 1e6 / n_steps
        frac = seconds / mean_step_s if mean_step_s else 0.0
        lines.append(SourceLine(location, seconds, frac, _source(location, roots), lib))
    return tuple(lines)


def _host_split(host_lines, host_frac: float) -> dict:
    """Host overhead split into the user's own work and torch's Python, in proportion to the sampled lines."""
    attributed = sum(h.frac for h in host_lines)
    if not host_lines or attributed <= 0:
        return {"host_user_frac": None, "host_framework_frac": None}
    user = sum(h.frac for h in host_lines if not h.in_torch) / attributed
    return {"host_user_frac": host_frac * user, "host_framework_frac": host_frac * (1 - user)}


def _source(location: str, roots: tuple[str, ...] = ()) -> str:
    """The line's text, when its file can be found: as given, or (a trace's relative path) under one of roots."""
    path, _, line = location.rpartition(":")
    if not line.isdigit():
        return ""
    for candidate in (path, *(os.path.join(root, path) for root in roots if not os.path.isabs(path))):
        text = linecache.getline(candidate, int(line)).strip()
        if text:
            return text
    return ""


def _flag(value) -> Optional[float]:
    return None if value is None else float(bool(value))


def _metrics(inputs: Inputs, steady: Trace, steps, fractions, stats, top, host_lines,
             timeline: StepTimeline) -> dict[str, Optional[float]]:
    trace, capture = inputs.trace, inputs.capture
    n = max(len(steps), 1)
    durations = np.array([s.duration_s for s in steps]) if steps else np.zeros(1)
    total_us = float(durations.sum() * 1e6) or 1.0
    m: dict[str, Optional[float]] = dict.fromkeys(METRICS)  # every metric present; None = unknown for this run
    m.update({f"{b}_frac": v for b, v in fractions.items()})
    m.update(
        steps_profiled=float(len(steps)),
        step_time_mean_s=stats["mean"], step_time_p50_s=stats["p50"], step_time_p95_s=stats["p95"],
        step_time_cv=float(durations.std() / durations.mean()) if durations.mean() > 0 else None,
        ops_per_step=float(top.sum()) / n,
        op_mean_us=float((steady.cpu_ops.end - steady.cpu_ops.start)[top].mean()) if top.any() else None,
        # unknown (not 0) when nothing could name lines: no stack samples, no Python frames in the trace
        host_top_line_frac=max((h.frac for h in host_lines if not h.in_torch), default=0.0)
        if inputs.stacks is not None or len(trace.python) else None,
        **_host_split(host_lines, fractions["host_overhead"]),
        item_calls_per_step=float(sum(1 for x in steady.cpu_ops.names if x == "aten::item")) / n,
        h2d_pageable_frac=op_stats.h2d_pageable_frac(trace),
    )
    m.update(_device_metrics(trace, steady, capture, timeline, total_us, n))
    m.update(_trace_loader_metrics(trace))
    m.update(_capture_metrics(capture, inputs.samples, n))
    m.update(unprofiled_metrics(capture, stats["mean"]))
    return m


def unprofiled_step_s(capture: Optional[Capture]) -> Optional[float]:
    """Seconds per step timed after the profiled window with the profiler off; None when not measured (a trace
    analysed on its own, a script that ended before the window closed)."""
    window = capture.unprofiled_window if capture is not None else None
    return window.step_s if window is not None and window.steps > 0 else None


def unprofiled_metrics(capture: Optional[Capture], profiled_mean_s: float) -> dict:
    plain = unprofiled_step_s(capture)
    return {
        "step_time_unprofiled_s": plain,
        "profiler_overhead_factor": profiled_mean_s / plain if plain and profiled_mean_s > 0 else None,
    }


def _device_metrics(trace: Trace, steady: Trace, capture: Optional[Capture], timeline: StepTimeline,
                    total_us: float, n: int) -> dict:
    used_cuda = capture is not None and capture.memory_kind == "cuda"
    has_gpu = trace.has_gpu or used_cuda
    capability = capture.environment.gpu_capability if capture else _trace_capability(trace)
    windows, within, host_within = timeline.device, iv.union(timeline.device), iv.union(timeline.host)
    metrics = {"has_gpu": float(has_gpu), **gpu.communication_metrics(trace, within, total_us)}
    if not has_gpu:
        return metrics
    kernels = iv.intersect(iv.union(trace.kernels.intervals()), within)
    fp32_gemm = op_stats.fp32_gemm_time_us(trace, within) / total_us
    rates = tensor_core_metrics(capability, capture.environment.gpu_name if capture else _trace_gpu_name(trace))
    speedup = rates["tensor_core_speedup"] or DEFAULT_TENSOR_SPEEDUP  # unknown GPU: the conservative default
    return {
        **metrics,
        **rates,
        "gpu_busy_frac": iv.total(kernels) / total_us,
        "tensor_core_gpu": None if capability is None else float(float(capability) >= 7.0),
        "fp32_gemm_frac": fp32_gemm,
        "tensor_core_loss_frac": fp32_gemm * (1 - 1 / speedup),
        "syncs_per_step": float(gpu.sync_points(steady).sum()) / n,
        **gpu.idle_attribution(trace, windows, total_us),
        **gpu.copy_metrics(trace, within, host_within, total_us, n),
        **gpu.launch_metrics(trace, within, host_within, n),
    }


def _trace_loader_metrics(trace: Trace) -> dict:
    """What the DataLoader spans' names tell: `_SingleProcessDataLoaderIter` loads in the training process."""
    kinds = {("multi" if "MultiProcessing" in n else "single") for n in trace.dataloader.names}
    if not kinds:
        return {}
    multi = "multi" in kinds
    return {"loader_multiprocess": float(multi), **({} if multi else {"loader_num_workers": 0.0})}


def _trace_gpu_name(trace: Trace) -> Optional[str]:
    props = trace.metadata.get("deviceProperties") or []
    return props[0].get("name") if props and isinstance(props[0], dict) else None


def _trace_capability(trace: Trace) -> Optional[str]:
    props = trace.metadata.get("deviceProperties") or []
    if not props:
        return None
    return f"{props[0].get('computeMajor', 0)}.{props[0].get('computeMinor', 0)}"


def _capture_metrics(capture: Optional[Capture], samples: Optional[Samples], n: int) -> dict:
    if capture is None:
        return {}
    env = capture.environment
    loader = _loader(capture)
    probe = capture.dataset_probe
    counters = capture.counters
    peak, capacity = capture.peak_memory_bytes, capture.memory_capacity_bytes
    return {
        "cpu_count": float(env.cpu_count),
        "peak_memory_bytes": _num(peak), "memory_capacity_bytes": _num(capacity),
        "peak_memory_frac": peak / capacity if peak and capacity else None,
        "empty_cache_per_step": counters.get("empty_cache_calls", 0) / max(capture.steps_seen, 1),
        **allocator_metrics(capture.allocator),
        "autocast_used": float(counters.get("autocast", 0) > 0),
        "data_parallel_used": float(counters.get("data_parallel", 0) > 0),
        "loader_count": float(len(capture.loaders)),
        "loader_num_workers": _num(loader.num_workers if loader else None),
        "loader_multiprocess": _flag(loader.num_workers > 0 if loader else None),
        "loader_batch_size": _num(loader.batch_size if loader else None),
        "loader_pin_memory": _flag(loader.pin_memory if loader else None),
        "loader_persistent_workers": _flag(loader.persistent_workers if loader else None),
        "dataset_deterministic": _flag(probe.deterministic if probe else None),
        "dataset_item_s": probe.item_s if probe else None,
        "dataset_item_cpu_frac": probe.item_cpu_frac if probe else None,
        **sample_metrics(samples),
    }


def allocator_metrics(stats: dict[str, int]) -> dict:
    """The CUDA allocator's counters as metrics (run mode on a GPU; unknown otherwise)."""
    allocated, reserved = stats.get("peak_allocated_bytes"), stats.get("peak_reserved_bytes")
    return {
        "allocator_retries": _num(stats.get("alloc_retries")),
        "allocator_ooms": _num(stats.get("ooms")),
        "peak_allocated_bytes": _num(allocated),
        "fragmentation_frac": 1 - allocated / reserved if allocated is not None and reserved else None,
    }


def sample_metrics(samples: Optional[Samples]) -> dict:
    if samples is None or not samples.t_s:
        return {"process_cpu_frac": None, "gpu_util_mean_frac": None}
    t = np.asarray(samples.t_s)
    lo, hi = samples.window_s or (t[0], t[-1])
    inside = (t >= lo) & (t <= hi)
    if not inside.any():
        inside = np.ones(len(t), dtype=bool)
    cpu = np.asarray(samples.process_cpu_frac, dtype=np.float64)[inside]
    gpu = [v for v, ok in zip(samples.gpu_util_frac, inside) if ok and v is not None] if samples.gpu_util_frac else []
    return {"process_cpu_frac": float(cpu.mean()), "gpu_util_mean_frac": float(np.mean(gpu)) if gpu else None}


def _num(value) -> Optional[float]:
    return None if value is None else float(value)


def _loader(capture: Optional[Capture]):
    """The loader training waited on most (a validation loader can be the one), else the training loader."""
    if capture is None or not capture.loaders:
        return None
    index = capture.wait_loader if capture.wait_loader is not None else capture.train_loader
    return capture.loaders[index] if index is not None else None


def _locations(capture: Optional[Capture], host_lines, syncs) -> dict[str, Optional[str]]:
    # "loader" is where the DataLoader is made (fixes edit that call): only a capture knows it, not a trace's frames
    loader = _loader(capture)
    return {
        "loader": loader.location if loader else None,
        "optimizer": capture.optimizers[0].location if capture and capture.optimizers else None,
        "model": capture.model.location if capture and capture.model else None,
        "host_top": next((h.location for h in host_lines if not h.in_torch), None),
        "sync": next((s.location for s in syncs if s.location), None),
    }


def _notes(inputs: Inputs, steps, from_frames: bool) -> tuple[str, ...]:
    notes = []
    if inputs.trace.step_definition != "ProfilerStep markers":
        notes.append(inputs.trace.step_definition)
    if from_frames:
        notes.append("code locations come from the trace's Python frames (with_stack): each is a function's first "
                     "line, the function the time was spent in")
    if inputs.capture is not None and inputs.capture.step_source not in (None, "dataloader", "manual"):
        notes.append(f"steps were found from {inputs.capture.step_source}() calls (no DataLoader drives training)")
    if len(steps) < 3:
        notes.append(f"only {len(steps)} step(s) were profiled: figures are rough")
    overhead = _profiler_overhead(inputs.capture, steps)
    if overhead:
        notes.append(overhead)
    return tuple(notes)


def _timeline_notes(timeline: StepTimeline) -> tuple[str, ...]:
    """Say so when the host's own step spans would have told a different story (it ran ahead of the GPU)."""
    if not timeline.linked or not timeline.host_ran_ahead:
        return ()
    host_ms = float((timeline.host[:, 1] - timeline.host[:, 0]).mean()) / 1e3
    device_ms = float((timeline.device[:, 1] - timeline.device[:, 0]).mean()) / 1e3
    return (f"the host enqueued each step in {host_ms:.1f} ms on average while the GPU took {device_ms:.1f} ms: "
            "steps are timed on the device timeline (each ends when the GPU work it launched ends)",)


OVERHEAD_NOTE_FACTOR = 1.2  # below this the profiler's cost is within run-to-run noise: not worth a note


def _profiler_overhead(capture: Optional[Capture], steps) -> Optional[str]:
    """The profiled steps against the same script's steps timed right after them with the profiler off."""
    plain = unprofiled_step_s(capture)
    if plain is None or not steps:
        return None
    profiled = float(np.mean([s.duration_s for s in steps]))
    window = capture.unprofiled_window
    timed = f"{window.steps} steps timed without the profiler after the profiled window ({plain * 1e3:.1f} ms)"
    if profiled >= plain * OVERHEAD_NOTE_FACTOR:
        return (f"steps took {profiled / plain:.1f}x longer under the profiler ({profiled * 1e3:.1f} ms mean) than the "
                f"{timed}: the step time shown is the unprofiled one; shares of time are measured under the profiler")
    if plain >= profiled * OVERHEAD_NOTE_FACTOR:
        return (f"the {timed} took {plain / profiled:.1f}x longer than the profiled steps ({profiled * 1e3:.1f} ms "
                "mean): the profiled step spans may not include all the device work the steps queued")
    return None
