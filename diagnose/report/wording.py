"""The sentences the report and the terminal share: the verdict and what happened to the script."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

from diagnose.model import Analysis, Capture, Diagnosis

CATEGORY_NAMES = {
    "data-loading": "data loading", "transfer": "host-to-device transfer", "utilization": "low utilization",
    "memory": "memory", "host-overhead": "host overhead", "communication": "communication",
}


def verdict(diagnosis: Diagnosis, analysis: Optional[Analysis]) -> str:
    if analysis is None or not analysis.steps:
        return "No training step was measured, so there is no diagnosis."
    ranked = [f for f in diagnosis.findings if f.severity in ("high", "medium")]
    if not ranked:
        compute = diagnosis.breakdown.get("compute", 0.0)
        return (f"No bottleneck found: {compute:.0%} of each step is compute in torch ops "
                f"(mean step {diagnosis.step_time_s['mean'] * 1e3:.1f} ms).")
    top = ranked[0]
    where = f" ({top.location})" if top.location else ""
    return f"Bottleneck: {CATEGORY_NAMES[top.category]}, {top.cost_fraction:.0%} of step time. {top.title}{where}."


def status_sentence(capture: Optional[Capture], analysis: Optional[Analysis]) -> str:
    steps = len(analysis.steps) if analysis else 0
    if capture is None:
        return "The script did not start under the profiler; nothing was measured."
    name = Path(capture.script).name
    if capture.status == "completed":
        return f"Profiled {steps} steps after {capture.warmup_steps} warm-up steps, then stopped {name}."
    if capture.status == "script_error" and capture.error:
        at = f" at step {capture.error.step}" if capture.error.step is not None else ""
        return (f"{name} raised {capture.error.type}{at}: {capture.error.message}. "
                f"Results cover the {steps} step(s) measured before that.")
    if capture.status == "interrupted":
        return f"Interrupted (Ctrl-C). Results cover the {steps} step(s) measured before that."
    if capture.status == "timeout":
        return f"Stopped at the time limit after {capture.steps_seen} steps; {steps} were profiled."
    if capture.status == "no_steps":
        return (f"{name} ran for {capture.wall_s:.0f} s without reaching a training step (no DataLoader batch, "
                "backward() or optimizer step). Mark steps with diagnose.step() (see the README).")
    if capture.status == "script_finished":
        return f"{name} finished on its own after {capture.steps_seen} steps; {steps} were profiled."
    return f"Capture ended with status {capture.status}."
