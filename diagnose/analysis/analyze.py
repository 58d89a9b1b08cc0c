"""Build the Analysis: turn a trace (plus the capture's samples and stack samples) into per-step breakdowns and
a flat mapping of named metrics. The English notes come from notes.py; nothing else is formatted here."""
from __future__ import annotations

from dataclasses import replace
from typing import Optional

import numpy as np

import diagnose.analysis.distributed as distributed
import diagnose.analysis.gpu as gpu
import diagnose.analysis.ops as op_stats
from diagnose.analysis.breakdown import (
    breakdown_fractions,
    compute_threads,
    exclusive_buckets,
    host_steps,
    per_step,
    step_stats,
)
from diagnose.analysis.compiled import compile_metrics, compiled_steps, with_dynamo, without_compiling_steps
from diagnose.analysis.fixed_cost import fixed_cost_metrics, with_loader_fixed
from diagnose.analysis.flops import trace_flops
from diagnose.analysis.frames import innermost_segments
from diagnose.analysis.host_lines import attribute_host_lines, lines_from_frames
from diagnose.analysis.memory import memory_breakdown, memory_metrics
from diagnose.analysis.metric_values import (
    capture_metrics,
    device_metrics,
    host_split,
    trace_loader_metrics,
    training_loader,
    unprofiled_metrics,
)
from diagnose.analysis.metrics import METRICS
from diagnose.analysis.notes import analysis_notes, timeline_notes
from diagnose.analysis.phases import optimizer_intervals, optimizer_metrics, phase_stats
from diagnose.analysis.roofline import roofline
from diagnose.analysis.speed_of_light import Busy, preferred_peaks, speed_metrics, speed_of_light
from diagnose.analysis.timeline import StepTimeline, step_timeline
from diagnose.lean_dataclass import dataclass
from diagnose.model import (
    Analysis,
    Capture,
    Peak,
    Samples,
    SpeedOfLight,
    StackSamples,
    stated_step_s,
    unprofiled_step_s,
)
from diagnose.trace import Trace, released, self_times
from diagnose.trace import intervals as iv


@dataclass(frozen=True)
class Inputs:
    trace: Trace
    capture: Optional[Capture] = None
    samples: Optional[Samples] = None
    stacks: Optional[StackSamples] = None
    source_roots: tuple[str, ...] = ()  # folders that relative paths in the trace's Python frames may be under
    peaks: tuple[Peak, ...] = ()  # the device's peaks: measured on this machine, and the datasheet's


def analyze(inputs: Inputs) -> Analysis:
    trace = inputs.trace
    host_step_spans = host_steps(trace)
    cut_short = inputs.capture is not None and not inputs.capture.last_step_complete and trace.kept_steps is None
    if cut_short and len(host_step_spans) > 1:
        host_step_spans = host_step_spans[:-1]  # the script stopped mid-step: that step's time is not a step time
    if trace.kept_steps is None:  # a step that compiled is not a step of the run's steady state
        host_step_spans = without_compiling_steps(trace, host_step_spans, inputs.capture)
    timeline = released(step_timeline(trace, host_step_spans))
    if trace.kept_steps is not None:  # its lead-in and lead-out steps were kept for the timeline: not steps of it
        host_step_spans, timeline = trace.kept_steps.own_steps(host_step_spans, timeline)
    device_steps = timeline.device  # time is accounted where the step really ran; host events are counted per host step
    buckets, _ = released(exclusive_buckets(trace, device_steps))
    steps = per_step(buckets, device_steps)
    fractions = breakdown_fractions(steps)
    stats = step_stats(steps)
    steady = released(within_steps(trace, host_step_spans))
    self_t, top = released(self_times(steady.cpu_ops, compute_threads(trace)))
    frames = innermost_segments(trace.python, trace.main_thread)
    if inputs.stacks is not None:
        host_lines = attribute_host_lines(trace, inputs.stacks, buckets["host_overhead"], len(steps), stats["mean"])
    else:
        host_lines = lines_from_frames(frames, buckets["host_overhead"], len(steps), stats["mean"], inputs.source_roots)
    syncs = gpu.sync_sources(steady, top, len(steps), frames) if trace.has_gpu and steps else ()
    phases = released(phase_stats(steady, timeline))
    metrics = released(_metrics(inputs, steady, steps, fractions, stats, top, host_lines, timeline))
    steps_us = sum(s.duration_s for s in steps) * 1e6
    if not metrics["has_gpu"] and steps_us > 0:  # on the host the CPU runs the elementwise ops itself
        elementwise_us = op_stats.elementwise_op_self_us(steady.cpu_ops, self_t, optimizer_intervals(steady))
        metrics["elementwise_frac"] = elementwise_us / steps_us
    metrics.update(fixed_cost_metrics(trace, steady, top, buckets["host_overhead"],
                                      iv.intersect(optimizer_intervals(steady), iv.union(device_steps)), steps_us))
    metrics["fixed_step_frac"] = with_loader_fixed(metrics, stats["mean"])
    metrics.update(optimizer_metrics(steady, timeline, phases, inputs.capture))
    memory = memory_breakdown(trace, host_step_spans, inputs.capture, inputs.samples)
    metrics.update(memory_metrics(memory, inputs.capture))
    busy = metrics.get("gpu_busy_frac") if trace.has_gpu else metrics.get("compute_frac")
    step_time_s = {**stats, "unprofiled": unprofiled_step_s(inputs.capture)}
    light = released(_speed_of_light(inputs, host_step_spans, step_time_s, busy))
    metrics.update(speed_metrics(light))
    compiled = with_dynamo(released(compiled_steps(steady, len(steps), steps_us)),
                           inputs.capture.compilation if inputs.capture is not None else None)
    metrics.update(compile_metrics(compiled, inputs.capture, step_time_s))
    return Analysis(
        steps=tuple(steps),
        step_time_s=step_time_s,
        breakdown=fractions,
        top_ops=op_stats.top_ops(steady.cpu_ops, self_t),
        host_lines=host_lines,
        metrics=metrics,
        locations=_locations(inputs.capture, host_lines, syncs, compiled),
        step_definition=trace.step_definition,
        notes=analysis_notes(trace, inputs.capture, steps, from_frames=inputs.stacks is None and bool(host_lines))
        + timeline_notes(timeline),
        syncs=syncs,
        phases=phases,
        framework=inputs.capture.framework if inputs.capture is not None else None,
        memory=memory,
        speed_of_light=light,
        compiled=compiled,
    )


def _speed_of_light(inputs: Inputs, host_step_spans: np.ndarray, step_time_s: dict,
                    busy_frac: Optional[float]) -> Optional[SpeedOfLight]:
    """torch's count from the run where there is one (the trace's beside it as a cross-check), else the trace's,
    over the step time the report states (unprofiled when measured)."""
    from_trace = released(trace_flops(inputs.trace, host_step_spans))
    capture = inputs.capture
    counted = capture.flops if capture is not None and capture.flops and capture.flops.per_step else None
    mean_step_s = step_time_s["mean"]
    tf32 = capture is not None and capture.tf32_matmuls and inputs.trace.has_gpu
    ops = roofline(inputs.trace, host_step_spans, preferred_peaks(inputs.peaks), tf32, mean_step_s)
    return speed_of_light(counted or from_trace, stated_step_s(step_time_s), inputs.peaks,
                          from_trace if counted else None, Busy(busy_frac, mean_step_s), tf32, ops)


def within_steps(trace: Trace, steps: np.ndarray) -> Trace:
    """The host-side events that start inside the measured steps: counted per step, they must not include an
    evaluation loop after training, or the step that was cut short."""
    if not len(steps):
        return trace
    within = iv.union(steps)

    def keep(spans):
        inside = np.flatnonzero(iv.contains(within, spans.start))
        return spans if len(inside) == len(spans) else spans.take(inside)

    return replace(trace, cpu_ops=keep(trace.cpu_ops), runtime=keep(trace.runtime))


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
        **host_split(host_lines, fractions["host_overhead"]),
        item_calls_per_step=float(np.count_nonzero(steady.cpu_ops.mask(lambda x: x == "aten::item"))) / n,
        h2d_pageable_frac=op_stats.h2d_pageable_frac(trace),
    )
    m.update(device_metrics(trace, steady, capture, timeline, total_us, n, inputs.peaks))
    m.update(trace_loader_metrics(trace))
    m.update(distributed.trace_metrics(trace, steady, iv.union(timeline.device), total_us, n))
    m.update(capture_metrics(capture, inputs.samples, n))
    if capture is not None:
        m.update(distributed.capture_metrics(capture))
    m.update(unprofiled_metrics(capture, stats["mean"]))
    return m


def _locations(capture: Optional[Capture], host_lines, syncs, compiled) -> dict[str, Optional[str]]:
    # "loader" is where the DataLoader is made (fixes edit that call): only a capture knows it, not a trace's frames
    loader = training_loader(capture)
    return {
        "loader": loader.location if loader else None,
        "optimizer": capture.optimizers[0].location if capture and capture.optimizers else None,
        "model": capture.model.location if capture and capture.model else None,
        "host_top": next((h.location for h in host_lines if not h.in_torch), None),
        "sync": next((s.location for s in syncs if s.location), None),
        "compile": capture.compilation.call_location if capture and capture.compilation else None,
        "graph_break": next((b.location for b in compiled.breaks if b.location), None) if compiled else None,
        "ddp": capture.ddp.location if capture and capture.ddp else None,  # the DistributedDataParallel(...) call
        "accumulation": capture.ddp.backward_location if capture and capture.ddp else None,  # its loop's backward()
        "fsdp": capture.fsdp.location if capture and capture.fsdp else None,  # the first fully_shard(...) call
    }
