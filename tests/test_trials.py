"""How the budget is spent: successive halving, sequential stops and failures, on simulated timed runs (the runs'
throughputs are drawn as a machine would give them; the planning logic under test is the real one)."""
from __future__ import annotations

import random

from diagnose.experiments.plan import Candidate
from diagnose.experiments.scheduler import Arm
from diagnose.experiments.trials import Trials
from diagnose.model import Change, Measurement, ScriptError, Window


class SimulatedScheduler:
    """Runs arms instantly: each setting has a true rate (None: it crashes), each run ~3% noise."""

    def __init__(self, rates: dict[str, float | None], budget_runs: int = 100):
        self.rates, self.rng, self.left = rates, random.Random(1), budget_runs
        self.log: list[str] = []

    def can_run(self, arm: Arm) -> bool:
        return self.left > 0

    def run(self, arm: Arm):
        if self.left <= 0:
            return None
        self.left -= 1
        self.log.append(arm.label)
        rate = self.rates[arm.label]
        if rate is None:
            m = Measurement("script_error", (), (), None, None, (), None, 3, ScriptError("OutOfMemoryError", "", "", 3))
        else:
            noisy = rate * (1 + self.rng.gauss(0, 0.03))
            m = Measurement("completed", (Window(60, 60 / noisy, None),), (), None, None, (), None, 80)
        arm.runs.append(m)
        return m


def _sweep(values: list[int]) -> list[Arm]:
    return [Arm("dataloader.num_workers", {"num_workers": v}, (Change("dataloader.num_workers", {"num_workers": v}),))
            for v in values]


def test_successive_halving_keeps_the_best_setting_and_decides_it_in_few_runs():
    arms = _sweep([2, 4, 8, 16])
    rates = {"baseline": 10.0, **{a.label: 10.0 * r for a, r in zip(arms, (2, 4, 7, 9))}}
    scheduler = SimulatedScheduler(rates)
    trials = Trials(scheduler, Arm("baseline", {}, ()))
    trials.start()
    trials.decide(Candidate("dataloader.num_workers", arms, 0.9))
    variant_runs = [label for label in scheduler.log if label != "baseline"]
    assert len(variant_runs) == Candidate("dataloader.num_workers", arms, 0.9).min_runs() == 6
    best = arms[-1]
    assert len(best.runs) == 2 and trials.comparison(best).verdict == "faster"
    assert "dropped from the sweep" in trials.dropped[id(arms[0])]


def test_a_setting_that_crashes_is_not_run_again_by_the_sweep():
    arms = _sweep([2, 4, 8, 16])
    rates = {"baseline": 10.0, arms[0].label: 20.0, arms[1].label: 30.0, arms[2].label: None, arms[3].label: None}
    scheduler = SimulatedScheduler(rates)
    trials = Trials(scheduler, Arm("baseline", {}, ()))
    trials.start()
    trials.decide(Candidate("dataloader.num_workers", arms, 0.9))
    assert scheduler.log.count(arms[2].label) == 1 and scheduler.log.count(arms[3].label) == 1
    assert trials.comparison(arms[1]).verdict == "faster"


def test_an_undecided_setting_gets_a_third_run_and_a_clear_one_does_not():
    clear, close = Arm("compile", {}, (Change("compile"),)), Arm("tf32", {}, (Change("tf32"),))
    scheduler = SimulatedScheduler({"baseline": 10.0, "compile": 30.0, "tf32": 10.3})
    trials = Trials(scheduler, Arm("baseline", {}, ()))
    trials.start()
    trials.decide(Candidate("compile", [clear], 0.5))
    trials.decide(Candidate("tf32", [close], 0.5))
    assert len(clear.runs) == 2 and len(close.runs) == 3
