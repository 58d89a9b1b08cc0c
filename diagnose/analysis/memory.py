"""Memory at the peak of a step: how high (the trace's memory events), when (the phase of the step around the peak)
and what it is made of (the sizes the capture measured: parameters, gradients, optimizer state, activations saved
for backward, buffers; the rest is `other`, never hidden).

On CUDA the profiler's totals are the caching allocator's own: the peak is read off them. On the host they count
from zero when the profiler started, so the peak is the live tensors between steps (measured by the capture) plus
the highest rise within a step above its start; the first profiled step is left out there, since blocks made
before the profiler started and freed in it are not in its count."""
from __future__ import annotations

from typing import Optional

import numpy as np

from diagnose.analysis.phases import point_phases
from diagnose.model import PHASES, Capture, MemoryBreakdown, MemoryPart, MemorySizes, Samples, Status
from diagnose.trace import CPU, CUDA, MemoryEvents, Trace, codes_of

TIMELINE_POINTS = 300
# parts alive at a peak in each phase: activations are held from forward until backward frees them; gradients
# appear in backward and stay through the optimizer step (zero_grad(set_to_none=True), torch's default, drops
# them before the next forward)
ACTIVATIONS_ALIVE = ("forward", "backward")
GRADIENTS_ALIVE = ("backward", "optimizer", "other")


def memory_breakdown(trace: Trace, host_windows: np.ndarray, capture: Optional[Capture],
                     samples: Optional[Samples] = None) -> Optional[MemoryBreakdown]:
    sizes = capture.memory_sizes if capture is not None else None
    device = _device(trace, sizes)
    events = trace.memory.of_device(CUDA if device == "cuda" else CPU)
    if not len(events) or not len(host_windows):
        return None
    step, base = _highest_step(events, host_windows, absolute=device == "cuda")
    if step is None:
        return None
    start, end = host_windows[step]
    inside = _within(events, start, end)
    highest = int(np.argmax(events.allocated[inside]))
    top = inside[highest]
    shift = _shift(device, base, sizes)
    peak = int(events.allocated[top] + shift) if shift is not None else None
    phases = point_phases(trace, events.ts[inside], codes_of([events.tids[i] for i in inside.tolist()]),
                          host_windows)
    phase = PHASES[int(phases[highest])]
    limit, source = _limit(capture, device, samples)
    t, level, phase_names = _timeline(events, inside, phases, start, shift or 0)
    return MemoryBreakdown(
        device=device, peak_bytes=peak, peak_phase=phase, parts=_parts(peak, phase, sizes),
        peak_basis=_basis(device, peak, step), limit_bytes=limit, limit_source=source,
        reserved_bytes=int(events.reserved[top]) if device == "cuda" else None,
        outside_torch_bytes=_outside_torch(samples, events) if device == "cuda" else None,
        timeline_s=t, timeline_bytes=level if peak is not None else (), timeline_phase=phase_names)


def _device(trace: Trace, sizes: Optional[MemorySizes]) -> str:
    if sizes is not None:
        return sizes.device
    return "cuda" if trace.has_gpu and (trace.memory.device_type == CUDA).any() else "cpu"


def _highest_step(events: MemoryEvents, windows: np.ndarray, absolute: bool) -> tuple[Optional[int], int]:
    """(step, its level at the start) of the step whose allocated total peaks highest (on the host: rises the
    highest above its start; the first step only when it is the only one)."""
    best: tuple[Optional[int], int] = (None, 0)
    best_score = -1
    candidates = range(len(windows)) if absolute or len(windows) == 1 else range(1, len(windows))
    for index in candidates:
        start, end = windows[index]
        inside = _within(events, start, end)
        if not len(inside):
            continue
        before = np.searchsorted(events.ts, start, side="left") - 1
        first = inside[0]
        base = int(events.allocated[before]) if before >= 0 else int(events.allocated[first] - events.nbytes[first])
        high = int(events.allocated[inside].max())
        score = high if absolute else high - base
        if score > best_score:
            best, best_score = (index, base), score
    return best


def _within(events: MemoryEvents, start: float, end: float) -> np.ndarray:
    """Indices of the events in [start, end): events are in time order, so two binary searches (a trace of
    thousands of steps and millions of allocations stays linear)."""
    return np.arange(np.searchsorted(events.ts, start, side="left"), np.searchsorted(events.ts, end, side="left"))


def _shift(device: str, base: int, sizes: Optional[MemorySizes]) -> Optional[int]:
    """What makes the trace's totals absolute: nothing on CUDA (the allocator's own); on the host, whose totals
    count from the profiler's start, the tensors live between steps (measured by the capture) above the step's
    starting level. None: a host trace alone, which cannot say."""
    if device == "cuda":
        return 0
    live = sizes.live_between_steps_bytes if sizes is not None else None
    return live - base if live is not None else None


def _parts(peak: Optional[int], phase: str, sizes: Optional[MemorySizes]) -> tuple[MemoryPart, ...]:
    if peak is None or sizes is None:
        return ()
    parts = [MemoryPart("parameters", sizes.parameters_bytes),
             MemoryPart("optimizer state", sizes.optimizer_state_bytes)]
    if sizes.buffers_bytes:
        parts.append(MemoryPart("buffers", sizes.buffers_bytes))
    if phase in GRADIENTS_ALIVE:
        parts.append(MemoryPart("gradients", sizes.gradients_bytes))
    if phase in ACTIVATIONS_ALIVE:
        room = max(peak - sum(p.bytes for p in parts), 0)
        held = min(sizes.activations_bytes, room)
        note = "" if held == sizes.activations_bytes else \
            f"of {sizes.activations_bytes} saved per step: backward had freed the rest by the peak"
        parts.append(MemoryPart("activations", held, note))
    known = sum(p.bytes for p in parts)
    if known > peak:  # sizes from another step than the peak's (a lazily made optimizer state, say): scale nothing,
        return tuple(parts) + (MemoryPart("other", 0, "the parts measured exceed the peak read from the trace"),)
    return tuple(parts) + (MemoryPart("other", peak - known, "temporaries, the batch and data held as tensors, "
                                                             "workspaces: what no part above accounts for"),)


def _limit(capture: Optional[Capture], device: str, samples: Optional[Samples]) -> tuple[Optional[int], str]:
    if capture is None:
        total = samples.gpu_mem_total_bytes if samples is not None and device == "cuda" else None
        return total, "the GPU's memory (NVML)" if total else ""
    reading = capture.memory_limit
    if reading is not None and (reading.kind != "gpu") == (device != "cuda"):  # the limit read where it applies
        return reading.limit_bytes, reading.source
    if capture.memory_limit_bytes:
        return capture.memory_limit_bytes, "--memory-limit"
    if device == "cuda" and capture.memory_kind == "cuda":
        return capture.memory_capacity_bytes, "the GPU's memory"
    return capture.environment.total_memory_bytes, "the machine's memory"


def _basis(device: str, peak: Optional[int], step: int) -> str:
    if device == "cuda":
        return f"the CUDA caching allocator's allocated total, from the trace's memory events (step {step})"
    if peak is None:
        return "the rise within a step only: the tensors live between steps were not measured (a trace alone)"
    return (f"tensors live between steps (measured in the run) plus the highest rise within a profiled step "
            f"(step {step}, from the trace's memory events)")


def _timeline(events: MemoryEvents, inside: np.ndarray, phases: np.ndarray, start: float,
              shift: int) -> tuple[tuple[float, ...], tuple[int, ...], tuple[str, ...]]:
    """At most TIMELINE_POINTS points: the highest of each stretch of events, so the peak is never averaged away."""
    if not len(inside):
        return (), (), ()
    groups = np.array_split(np.arange(len(inside)), min(TIMELINE_POINTS, len(inside)))
    picks = [g[int(np.argmax(events.allocated[inside[g]]))] for g in groups if len(g)]
    rows = inside[picks]
    return (tuple(float((events.ts[i] - start) / 1e6) for i in rows.tolist()),
            tuple(int(events.allocated[i] + shift) for i in rows.tolist()),
            tuple(PHASES[int(phases[p])] for p in picks))


def _outside_torch(samples: Optional[Samples], events: MemoryEvents) -> Optional[int]:
    """NVML's used memory beyond the most the caching allocator reserved: CUDA context, NCCL, cuBLAS workspaces."""
    if samples is None:
        return None
    used = [u for u in samples.gpu_mem_used_bytes if u is not None]
    if not used or not len(events):
        return None
    return max(0, max(used) - int(events.reserved.max()))


def estimated_breakdown(capture: Capture) -> Optional[MemoryBreakdown]:
    """An out-of-memory run with no profiled step: the sizes as far as they were measured, and the need of a
    whole step estimated as what was in use when it failed plus what it asked for."""
    oom, sizes = capture.out_of_memory, capture.memory_sizes
    if oom is None:
        return None
    need = (oom.in_use_bytes or 0) + (oom.requested_bytes or 0) or None
    return MemoryBreakdown(
        device=oom.device, peak_bytes=need, peak_phase=oom.phase if oom.phase in PHASES else None,
        parts=_parts(need, oom.phase, sizes) if need and sizes is not None else (),
        peak_basis="an estimate: in use when it ran out of memory plus the allocation that failed",
        limit_bytes=oom.limit_bytes, limit_source=oom.limit_source, estimate=True)


def memory_metrics(memory: Optional[MemoryBreakdown], capture: Optional[Capture]) -> dict[str, Optional[float]]:
    """The breakdown as shares of the peak, for the memory rules; unknown (None) without a measured peak."""
    oom = capture is not None and capture.status == Status.OUT_OF_MEMORY
    values: dict[str, Optional[float]] = {"out_of_memory": 1.0 if oom else (0.0 if capture is not None else None)}
    peak = memory.peak_bytes if memory is not None else None
    parts = {p.name: p.bytes for p in memory.parts} if memory is not None else {}
    for name, metric in (("activations", "activations"), ("optimizer state", "optimizer_state"),
                         ("gradients", "gradients"), ("parameters", "parameters"), ("other", "unattributed")):
        values[f"memory_{metric}_frac"] = parts.get(name, 0) / peak if peak and parts else None
    values["memory_peak_bytes"] = float(peak) if peak else None
    values["memory_peak_limit_frac"] = peak / memory.limit_bytes if peak and memory.limit_bytes else None
    outside = memory.outside_torch_bytes if memory is not None else None
    values["memory_outside_torch_frac"] = outside / memory.limit_bytes if outside is not None and \
        memory.limit_bytes else None
    return values
