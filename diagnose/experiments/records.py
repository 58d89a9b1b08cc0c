"""What both experiment stages (timed comparisons in stage.py, making an out-of-memory run fit in memory_fit.py)
write the same way: a setting's label, an optimization skipped with its reason, why a run failed."""
from __future__ import annotations

from diagnose.formatting import setting_label
from diagnose.model import Experiment, Measurement, Status, Verdict
from diagnose.optimizations import REGISTRY

__all__ = ["setting_label", "skipped_experiment", "failure_text"]


def skipped_experiment(optimization: str, reason: str, metric: str = "") -> Experiment:
    known = REGISTRY.get(optimization)
    return Experiment(optimization=optimization, setting={}, metric=metric or (known.metric if known else "steps/s"),
                      speedup=None, ci=None, verdict=Verdict.SKIPPED, loss_drift=None, peak_memory_bytes=None,
                      reason=reason,
                      fidelity=known.fidelity if known else "")


def failure_text(m: Measurement) -> str:
    if m.error is not None:
        return f"{m.error.type}: {m.error.message}"
    if m.status == Status.SCRIPT_FINISHED:
        return f"the script finished its epochs after {m.steps_seen} steps, before the warm-up ended"
    return f"the run ended with status {m.status} before a timed window"
