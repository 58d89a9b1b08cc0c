"""The English notes an Analysis carries: how steps were defined, where code locations come from, and when
the figures deserve caution (few steps, the profiler's own cost, a host that ran ahead of the GPU)."""
from __future__ import annotations

from typing import Optional

import numpy as np

from diagnose.analysis.timeline import StepTimeline
from diagnose.model import Capture, unprofiled_step_s
from diagnose.trace import Trace


def analysis_notes(trace: Trace, capture: Optional[Capture], steps, from_frames: bool) -> tuple[str, ...]:
    notes = [trace.kept_steps.note()] if trace.kept_steps is not None else []
    cut_in_time = trace.kept_steps is not None and trace.kept_steps.by_time  # (its note, first, says what the step is)
    if trace.step_definition != "ProfilerStep markers" and not cut_in_time:
        notes.append(trace.step_definition)
    if from_frames:
        notes.append("code locations come from the trace's Python frames (with_stack): each is a function's first "
                     "line, the function the time was spent in")
    if capture is not None and capture.micro_batches_per_step > 1:
        notes.append(f"a step is one optimizer step = {capture.micro_batches_per_step} micro-batches (gradient "
                     "accumulation): each step's figures cover all of them")
    if capture is not None and capture.step_source not in (None, "dataloader", "manual"):
        notes.append(f"steps were found from {capture.step_source}() calls (no DataLoader drives training)")
    if len(steps) < 3 and not cut_in_time:  # (a span of time holds many)
        notes.append(f"only {len(steps)} step(s) were profiled: figures are rough")
    late = _late_compiles(capture)
    if late:
        notes.append(late)
    overhead = profiler_overhead_note(capture, steps)
    if overhead:
        notes.append(overhead)
    return tuple(notes)


def _late_compiles(capture: Optional[Capture]) -> str:
    """Compilations after the warm-up fell in the timed or profiled steps: the profiled ones hold their time."""
    compilation = capture.compilation if capture is not None else None
    if compilation is None:
        return ""
    late = [e for e in compilation.events if e.step >= capture.warmup_steps and e.seconds > 0]
    if not late:
        return ""
    steps = len({e.step for e in late})
    return (f"torch.compile compiled {len(late)} time(s) after the warm-up ({sum(e.seconds for e in late):.1f} s, a "
            f"new input size now and then): the {steps} step(s) it compiled in are left out of the profiled steps, "
            "and its time out of the steps timed without the profiler")


def timeline_notes(timeline: StepTimeline) -> tuple[str, ...]:
    """Say so when the host's own step spans would have told a different story (it ran ahead of the GPU)."""
    if not timeline.linked or not timeline.host_ran_ahead:
        return ()
    host_ms = float((timeline.host[:, 1] - timeline.host[:, 0]).mean()) / 1e3
    device_ms = float((timeline.device[:, 1] - timeline.device[:, 0]).mean()) / 1e3
    return (f"the host enqueued each step in {host_ms:.1f} ms on average while the GPU took {device_ms:.1f} ms: "
            "steps are timed on the device timeline (each ends when the GPU work it launched ends)",)


OVERHEAD_NOTE_FACTOR = 1.2  # below this the profiler's cost is within run-to-run noise: not worth a note


def profiler_overhead_note(capture: Optional[Capture], steps) -> Optional[str]:
    """The profiled steps against the same script's steps timed right before them with the profiler off."""
    plain = unprofiled_step_s(capture)
    if plain is None or not steps:
        return None
    profiled = float(np.mean([s.duration_s for s in steps]))
    window = capture.unprofiled_window
    timed = f"{window.steps} steps timed without the profiler before the profiled window ({plain * 1e3:.1f} ms)"
    if profiled >= plain * OVERHEAD_NOTE_FACTOR:
        return (f"steps took {profiled / plain:.1f}x longer under the profiler ({profiled * 1e3:.1f} ms mean) than the "
                f"{timed}: the step time shown is the unprofiled one; shares of time are measured under the profiler")
    if plain >= profiled * OVERHEAD_NOTE_FACTOR:
        return (f"the {timed} took {plain / profiled:.1f}x longer than the profiled steps ({profiled * 1e3:.1f} ms "
                "mean): the profiled step spans may not include all the device work the steps queued")
    return None
