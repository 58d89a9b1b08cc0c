"""How the budget is spent: successive halving, sequential stops and failures, on simulated timed runs (the runs'
throughputs are drawn as a machine would give them; the planning logic under test is the real one)."""
from __future__ import annotations

import random

import pytest

from diagnose.experiments.plan import Candidate, covered, runs_needed
from diagnose.experiments.scheduler import Arm
from diagnose.experiments.trials import Trials
from diagnose.model import Change, Measurement, ScriptError, SteadyTiming


class SimulatedScheduler:
    """Runs arms instantly: each setting has a true rate (None: it crashes), each run ~3% noise."""

    def __init__(self, rates: dict[str, float | None], budget_runs: int = 100):
        self.rates, self.rng, self.left = rates, random.Random(1), budget_runs
        self.log: list[str] = []

    def can_run(self, arm: Arm) -> bool:
        return self.left > 0

    def remaining_s(self) -> float:
        return self.left * 10.0

    def estimate_s(self, arm: Arm) -> float:
        return 10.0

    def run(self, arm: Arm):
        if self.left <= 0:
            return None
        self.left -= 1
        self.log.append(arm.label)
        rate = self.rates[arm.label]
        if rate is None:
            m = Measurement(status="script_error", windows=(), applied=(), startup_s=None, first_step_s=None,
                            losses=(), peak_memory_bytes=None, steps_seen=3,
                            error=ScriptError("OutOfMemoryError", "", "", 3))
        else:
            noisy = rate * (1 + self.rng.gauss(0, 0.03))
            m = Measurement(status="completed", windows=(SteadyTiming(steps=60, seconds=60 / noisy, samples=None),),
                            applied=(), startup_s=None, first_step_s=None, losses=(), peak_memory_bytes=None,
                            steps_seen=80)
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
    assert "dropped from the sweep" in arms[0].dropped


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


class ClockedScheduler(SimulatedScheduler):
    """A simulated clock: every run takes `run_s` seconds of a `budget_s` budget, as the scheduler counts them
    (a run starts only when its estimate fits in what is left)."""

    def __init__(self, rates: dict[str, float | None], budget_s: float, run_s: float):
        super().__init__(rates)
        self.budget_s, self.run_s, self.clock = budget_s, run_s, 0.0

    def remaining_s(self) -> float:
        return self.budget_s - self.clock

    def estimate_s(self, arm: Arm) -> float:
        return self.run_s

    def can_run(self, arm: Arm) -> bool:
        return self.remaining_s() >= self.run_s

    def run(self, arm: Arm):
        if not self.can_run(arm):
            return None
        self.clock += self.run_s
        return super().run(arm)


def _clearly_faster(settings: int) -> tuple[list[Arm], dict[str, float]]:
    arms = _sweep([2 ** (i + 1) for i in range(settings)])
    return arms, {"baseline": 10.0, **{a.label: 10.0 * (2 + i) for i, a in enumerate(arms)}}


@pytest.mark.parametrize("settings, runs", [(1, 4), (2, 6), (4, 10), (5, 16)])
def test_the_plans_run_count_is_the_runs_the_trials_make(settings, runs):
    arms, rates = _clearly_faster(settings)
    candidate = Candidate("dataloader.num_workers", arms, 0.9)
    predicted = runs_needed([candidate])
    run_s = 7.0
    # a budget of exactly the predicted runs covers the whole sweep...
    assert covered([candidate], predicted * run_s, run_s) == [candidate]
    assert covered([candidate], (predicted - 1) * run_s, run_s) != [candidate]
    # ...and with runs to spare, the trials make exactly those runs, ending with a verdict on the best setting
    scheduler = ClockedScheduler(rates, (predicted + 5) * run_s, run_s)
    trials = Trials(scheduler, Arm("baseline", {}, ()))
    trials.start()
    trials.decide_in_budget([candidate], keep_for_combination=True)
    assert (predicted, len(scheduler.log)) == (runs, runs)
    survivor_runs = {1: 2, 2: 2, 4: 2, 5: 3}[settings]  # rounds it ran in: 5 settings -> 5, 3, 2
    assert trials.comparison(arms[-1]).verdict == "faster" and len(arms[-1].runs) == survivor_runs


def test_a_budget_one_run_short_trims_the_sweep_and_the_trials_stay_within_it():
    arms, rates = _clearly_faster(5)
    candidate = Candidate("dataloader.num_workers", arms, 0.9)
    run_s = 7.0
    budget_s = (runs_needed([candidate]) - 1) * run_s
    chosen = covered([candidate], budget_s, run_s)
    assert len(chosen[0].arms) == 4 and chosen[0].arms == arms[-4:]  # the strongest settings kept
    scheduler = ClockedScheduler(rates, budget_s, run_s)
    trials = Trials(scheduler, Arm("baseline", {}, ()))
    trials.start()
    trials.decide_in_budget(chosen)
    assert len(scheduler.log) == runs_needed(chosen) <= budget_s / run_s


def test_several_optimizations_and_their_combination_make_the_runs_the_plan_counted():
    workers, rates = _clearly_faster(4)
    single = Arm("compile", {}, (Change("compile"),))
    pair = _sweep([32, 64])
    rates.update({"compile": 25.0, pair[0].label: 30.0, pair[1].label: 40.0})
    combined = Arm("combined", {}, (Change("compile"),))
    rates["combined"] = 90.0
    candidates = [Candidate("dataloader.num_workers", workers, 0.9), Candidate("compile", [single], 0.5),
                  Candidate("dataloader.num_workers", pair, 0.4)]
    run_s = 5.0
    together = Candidate("combined", [combined], 1.0)
    predicted = runs_needed(candidates + [together])
    assert covered(candidates, predicted * run_s, run_s, combine=True) == candidates
    scheduler = ClockedScheduler(rates, (predicted + 5) * run_s, run_s)  # runs to spare: none may be used
    trials = Trials(scheduler, Arm("baseline", {}, ()))
    trials.start()
    trials.decide_in_budget(candidates, keep_for_combination=True)
    trials.decide_in_budget([together])
    assert len(scheduler.log) == predicted == 2 + (6 + 2 + 3 + 2) + 6  # baseline: first two, then one per two
    assert len(combined.runs) == 2


def _unprofiled_context():
    """A Context with no loader and no analysis: the combination's headline is all that is under test."""
    from diagnose.model import Capture, Environment
    from diagnose.optimizations.base import Context
    environment = Environment("3.11", "2.13.0", "linux", 2, 8 << 30, False)
    return Context(Capture("completed", "train.py", (), "optimizer", 20, 5, 3, 10.0, environment), None)


@pytest.mark.parametrize("budget_left", [0, 10])
def test_the_headline_is_the_best_verified_change_when_no_run_is_left_for_the_winners_together(budget_left):
    from diagnose.experiments.stage import _combine_and_ceiling, _result
    workers, pinned = _sweep([4])[0], Arm("dataloader.pin_memory", {}, (Change("dataloader.pin_memory"),))
    scheduler = SimulatedScheduler({"baseline": 10.0, workers.label: 30.0, pinned.label: 12.0, "combined": 33.0})
    trials = Trials(scheduler, Arm("baseline", {}, ()))
    trials.start()
    for arm in (workers, pinned, workers, pinned, workers, pinned):
        trials.run(arm)
    ctx = _unprofiled_context()
    verdicts = {arm: _result(arm, trials.baseline, ctx, noise=trials.noise()) for arm in (workers, pinned)}
    assert [verdicts[a].verdict for a in (workers, pinned)] == ["faster", "faster"]
    scheduler.left = budget_left
    candidates = [Candidate("dataloader.num_workers", [workers], 0.9),
                  Candidate("dataloader.pin_memory", [pinned], 0.5)]
    headline, extra = _combine_and_ceiling(trials, candidates, verdicts, ctx, riders=[])
    combined = next(e for e in extra if e.optimization == "combined")
    if budget_left:  # the winners together were measured: they are the headline
        assert combined.verdict == "faster" and headline.verdict == "faster"
        assert headline.speedup == combined.speedup and len(headline.changes) == 2
    else:  # never "skipped" as the headline while a change was verified faster on its own
        assert combined.verdict == "skipped"
        assert headline.verdict == "faster" and headline.speedup == verdicts[workers].speedup
        assert headline.changes == (workers.label,)


@pytest.mark.parametrize("combine", [False, True])
@pytest.mark.parametrize("budget_s", [12.0, 30.0, 45.0])
def test_the_plan_sentence_says_what_the_planner_did(combine, budget_s):
    """`diagnose run --budget-seconds 30 sample_runs/slow_loader.py` once said "it fits 5 run(s); a verdict needs at
    least 4 ... Nothing was run: give --budget-seconds 30 or more": the planner had kept runs for the combination
    with persistent workers (7 in all), the sentence counted 4. The runs it names and the budget it asks for are the
    planner's own."""
    import re

    from diagnose.experiments.plan import fewest_runs, plan_sentence

    run_s = 6.4
    workers = Candidate("dataloader.num_workers", [Arm(f"w{n}", {}, ()) for n in (2, 4, 8, 16)], 0.9)
    chosen = covered([workers], budget_s, run_s, combine=combine)
    said = plan_sentence(budget_s, run_s, chosen, [workers], combine=combine)
    if chosen:
        assert "Nothing was run" not in said and "dataloader.num_workers" in said
        return
    need = int(re.search(r"a verdict needs at least (\d+)", said).group(1))
    fits = int(re.search(r"fits (\d+) run", said).group(1))
    asked = int(re.search(r"--budget-seconds (\d+)", said).group(1))
    assert need == fewest_runs(combine) and fits < need, said
    assert asked > budget_s and covered([workers], asked, run_s, combine=combine), said  # the budget asked suffices
