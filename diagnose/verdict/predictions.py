"""Each finding's prediction held against what its fixes measured: a finding says how much of the step its fix
removes before anything runs; the experiments say what the fix gave. A prediction off by more than OFF_BY either
way is said and counted, so a rule whose cost does not follow its evidence shows itself on every run."""
from __future__ import annotations

from typing import Optional

from diagnose.model import Experiment, Finding, PredictionCheck, Verdict

OFF_BY = 2.0  # predicted / measured beyond this (or under its inverse): the prediction is called wrong
DECIDED = (Verdict.FASTER, Verdict.SLOWER, Verdict.NO_CHANGE)  # an undecided interval checks no prediction
UNDECIDED = "undecided"  # a PredictionCheck whose fixes' only measurements were undecided: not checked
AMORTISED_BY_BATCH = "batch_size"  # a larger batch spreads a finding's cost over more samples, it does not remove it
PARALLEL_LOADING = "dataloader.num_workers"  # more workers share a loader's wait among them
IO_BOUND_BELOW = 0.5  # an item's CPU share under this waits on I/O: workers past the cores still help


def check_predictions(findings: tuple[Finding, ...], experiments: tuple[Experiment, ...],
                      metrics: dict) -> tuple[PredictionCheck, ...]:
    """Each finding that predicts a speedup, against its best experiment. `metrics`: the run's, for the changes
    whose prediction depends on how far they went (the batch, the loader's workers)."""
    return tuple(_check(f, experiments, metrics) for f in findings if f.predicted_speedup is not None)


def _check(finding: Finding, experiments: tuple[Experiment, ...], metrics: dict) -> PredictionCheck:
    tried = [e for e in experiments if e.optimization in finding.optimizations and e.verdict in DECIDED
             and e.speedup is not None and not e.fidelity_warning]
    if not tried:
        return _undecided(finding, experiments)
    best = max(tried, key=lambda e: e.speedup)
    predicted, basis = predicted_for(finding, best, metrics)
    return PredictionCheck(rule=finding.rule, predicted_speedup=predicted, experiment=_label(best),
                           measured_speedup=best.speedup, measured_ci=best.ci, verdict=judge(predicted, best),
                           ratio=predicted / best.speedup, basis=basis)


def _undecided(finding: Finding, experiments: tuple[Experiment, ...]) -> PredictionCheck:
    """No decided experiment: unmeasured, or undecided where one of its fixes ran to an interval that decides
    nothing (its cause beside): checked by none, whatever the interval's middle says."""
    undecided = [e for e in experiments if e.optimization in finding.optimizations
                 and e.verdict == Verdict.UNDECIDED and not e.fidelity_warning]
    if not undecided:
        return PredictionCheck(rule=finding.rule, predicted_speedup=finding.predicted_speedup, experiment="")
    narrowest = min(undecided, key=lambda e: e.ci[1] / e.ci[0] if e.ci else float("inf"))
    return PredictionCheck(rule=finding.rule, predicted_speedup=finding.predicted_speedup,
                           experiment=_label(narrowest), measured_speedup=narrowest.speedup,
                           measured_ci=narrowest.ci, verdict=UNDECIDED,
                           undecided_cause=narrowest.undecided_cause)


def predicted_for(finding: Finding, experiment: Experiment, metrics: dict) -> tuple[float, str]:
    """The finding's prediction at the change the experiment made, and what it rests on where that is not the
    finding's own cost. k times the batch spreads the step's fixed share c (measured, no more than the speed of
    light leaves; else the finding's cost) over k times the samples: 1 / (c / k + 1 - c). k times the loader's
    workers (no more than the cores for items that compute; all of them for items that wait on I/O) divides the
    finding's wait c by k: 1 / (1 - c + c / k). Any other fix removes the cost: 1 / (1 - c)."""
    factor = batch_factor(experiment, metrics.get("loader_batch_size"))
    if factor is not None:
        fixed = _fixed_share(metrics)
        share = fixed if fixed is not None else finding.cost_fraction
        basis = f"the step's fixed share, {share:.0%}, over {factor:g}x the samples" if fixed is not None else ""
        return 1 / (share / factor + 1 - share), basis
    workers = worker_factor(experiment, metrics)
    if workers is not None:
        cost = finding.cost_fraction
        return 1 / (1 - cost + cost / workers), f"its {cost:.0%} wait shared by {workers:g}x the loading processes"
    return finding.predicted_speedup, ""


def _fixed_share(metrics: dict) -> Optional[float]:
    fixed, mfu = metrics.get("fixed_step_frac"), metrics.get("mfu")
    if fixed is not None and mfu is not None and 0 < mfu < 1:
        return min(fixed, 1 - mfu)
    return fixed


def batch_factor(experiment: Experiment, batch_size: Optional[float]) -> Optional[float]:
    tried = experiment.setting.get("batch_size") if experiment.optimization == AMORTISED_BY_BATCH else None
    if not tried or not batch_size:
        return None
    return max(1.0, tried / batch_size)


def worker_factor(experiment: Experiment, metrics: dict) -> Optional[float]:
    """How many times the loading processes the experiment ran: its workers over the script's (its main process
    when it had none), no more than the cores when the items compute rather than wait."""
    tried = experiment.setting.get("num_workers") if experiment.optimization == PARALLEL_LOADING else None
    if not tried:
        return None
    item_cpu, cores = metrics.get("dataset_item_cpu_frac"), metrics.get("cpu_count")
    computing = item_cpu is None or item_cpu >= IO_BOUND_BELOW
    usable = min(tried, cores) if computing and cores else tried
    return max(1.0, usable / max(metrics.get("loader_num_workers") or 0, 1))


def judge(predicted: float, measured: Experiment) -> str:
    """Off by more than OFF_BY only where the measurement's interval says so: its whole interval under half the
    prediction, or over twice it (the point alone where it has no interval)."""
    low, high = measured.ci if measured.ci else (measured.speedup, measured.speedup)
    if predicted / OFF_BY > high:
        return "over-predicted"
    if predicted * OFF_BY < low:
        return "under-predicted"
    return "agrees"


def _label(experiment: Experiment) -> str:
    setting = ", ".join(f"{k}={v}" for k, v in experiment.setting.items())
    return f"{experiment.optimization}({setting})" if setting else experiment.optimization


def count_off(checks: tuple[PredictionCheck, ...]) -> int:
    return sum(1 for c in checks if c.verdict in ("over-predicted", "under-predicted"))
