"""Each finding's prediction held against what its fixes measured: a finding says how much of the step its fix
removes before anything runs; the experiments say what the fix gave. A prediction off by more than OFF_BY either
way is said and counted, so a rule whose cost does not follow its evidence shows itself on every run."""
from __future__ import annotations

from typing import Optional

from diagnose.model import Experiment, Finding, PredictionCheck, Verdict

OFF_BY = 2.0  # predicted / measured beyond this (or under its inverse): the prediction is called wrong
DECIDED = (Verdict.FASTER, Verdict.SLOWER, Verdict.NO_CHANGE)
AMORTISED_BY_BATCH = "batch_size"  # a larger batch spreads a finding's cost over more samples, it does not remove it


def check_predictions(findings: tuple[Finding, ...], experiments: tuple[Experiment, ...],
                      batch_size: Optional[float], fixed_share: Optional[float] = None,
                      mfu: Optional[float] = None) -> tuple[PredictionCheck, ...]:
    """`batch_size`: the training loader's batch, to predict a batch_size experiment at the factor it tried;
    `fixed_share`: the step's measured share that does not grow with the batch (fixed_step_frac), which a larger
    batch spreads whichever finding recommended it (a loader's per-batch cost, the optimizer's update), no more
    than the speed of light leaves (1 - `mfu`)."""
    if fixed_share is not None and mfu is not None and 0 < mfu < 1:
        fixed_share = min(fixed_share, 1 - mfu)
    return tuple(_check(f, experiments, batch_size, fixed_share) for f in findings if f.predicted_speedup is not None)


def _check(finding: Finding, experiments: tuple[Experiment, ...], batch_size: Optional[float],
           fixed_share: Optional[float]) -> PredictionCheck:
    tried = [e for e in experiments if e.optimization in finding.optimizations and e.verdict in DECIDED
             and e.speedup is not None and not e.fidelity_warning]
    if not tried:
        return PredictionCheck(rule=finding.rule, predicted_speedup=finding.predicted_speedup, experiment="")
    best = max(tried, key=lambda e: e.speedup)
    predicted = predicted_for(finding, best, batch_size, fixed_share)
    basis = ""
    if batch_factor(best, batch_size) is not None and fixed_share is not None:
        basis = (f"the step's fixed share, {fixed_share:.0%}, over {batch_factor(best, batch_size):g}x the samples")
    return PredictionCheck(rule=finding.rule, predicted_speedup=predicted, experiment=_label(best),
                           measured_speedup=best.speedup, measured_ci=best.ci, verdict=judge(predicted, best),
                           ratio=predicted / best.speedup, basis=basis)


def judge(predicted: float, measured: Experiment) -> str:
    """Off by more than OFF_BY only where the measurement's interval says so: its whole interval under half the
    prediction, or over twice it (the point alone where it has no interval)."""
    low, high = measured.ci if measured.ci else (measured.speedup, measured.speedup)
    if predicted / OFF_BY > high:
        return "over-predicted"
    if predicted * OFF_BY < low:
        return "under-predicted"
    return "agrees"


def predicted_for(finding: Finding, experiment: Experiment, batch_size: Optional[float],
                  fixed_share: Optional[float] = None) -> float:
    """The finding's bound at the change the experiment made: k times the batch spreads the step's fixed share c
    (measured, else the finding's cost) over k times the samples, 1 / (c / k + 1 - c) the samples/s; any other fix
    removes the finding's cost c, 1 / (1 - c)."""
    factor = batch_factor(experiment, batch_size)
    if factor is None:
        return finding.predicted_speedup
    cost = fixed_share if fixed_share is not None else finding.cost_fraction
    return 1 / (cost / factor + 1 - cost)


def batch_factor(experiment: Experiment, batch_size: Optional[float]) -> Optional[float]:
    tried = experiment.setting.get("batch_size") if experiment.optimization == AMORTISED_BY_BATCH else None
    if not tried or not batch_size:
        return None
    return max(1.0, tried / batch_size)


def _label(experiment: Experiment) -> str:
    setting = ", ".join(f"{k}={v}" for k, v in experiment.setting.items())
    return f"{experiment.optimization}({setting})" if setting else experiment.optimization


def count_off(checks: tuple[PredictionCheck, ...]) -> int:
    return sum(1 for c in checks if c.verdict in ("over-predicted", "under-predicted"))
