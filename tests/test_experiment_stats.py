"""The statistics behind every speedup claim: A/A comparisons must claim no change (no-change, or undecided when
the interval is too wide to tell a 2x gain from a 2x loss), real effects must show."""
from __future__ import annotations

import random

import pytest

from diagnose.experiments.scheduler import Arm
from diagnose.experiments.stage import _headline
from diagnose.model import Experiment, Measurement, SteadyTiming
from diagnose.verdict.stats import compare, loss_drift, pooled_noise


def _arm(rng: random.Random, mean: float, runs: int, between: float = 0.03, within: float = 0.05,
         windows: int = 3) -> Arm:
    """Timed runs as the runner records them: each process has its own luck (an offset shared by all its
    windows), each window its own noise, and rare stalls."""
    arm = Arm("x", {}, ())
    for _ in range(runs):
        offset = rng.gauss(0, between)
        timed = []
        for _ in range(windows):
            stall = 0.6 if rng.random() < 0.03 else 1.0
            rate = mean * (1 + offset) * (1 + rng.gauss(0, within)) * stall
            timed.append(SteadyTiming(steps=40, seconds=40 / rate, samples=None))
        arm.runs.append(Measurement(status="completed", windows=tuple(timed), applied=(), startup_s=None,
                                    first_step_s=None, losses=(), peak_memory_bytes=None, steps_seen=200))
    return arm


def _verdict(rng: random.Random, base: float, variant: float, runs=(6, 2), **noise) -> str:
    baseline, other = _arm(rng, base, runs[0], **noise), _arm(rng, variant, runs[1], **noise)
    return compare(baseline.throughputs("steps/s"), other.throughputs("steps/s")).verdict


@pytest.mark.parametrize("between, within", [(0.03, 0.05), (0.01, 0.01), (0.02, 0.01), (0.03, 0.005)])
def test_a_a_comparisons_report_no_change_at_least_97_5_percent_of_the_time(between, within):
    # windows of one process share its luck: counted as independent samples, a 3% process-to-process spread with
    # steady windows (the last case) made 19% of A/A comparisons "faster"
    rng = random.Random(1234)
    trials = 2000
    verdicts = [_verdict(rng, 100.0, 100.0, between=between, within=within) for _ in range(trials)]
    claims = verdicts.count("faster") + verdicts.count("slower")
    assert claims / trials <= 0.025  # nominal 1%; stalls make the tails heavier


def _pooled_verdicts(rng: random.Random, effect: float, trials: int, **noise) -> list[str]:
    """As a budgeted session runs it: a 3-run baseline, the arm under test with 2 runs, and 3 other settings with
    2 runs each; the noise is pooled over all of them."""
    verdicts = []
    for _ in range(trials):
        baseline = _arm(rng, 100.0, 3, **noise).throughputs("steps/s")
        arm = _arm(rng, 100.0 * effect, 2, **noise).throughputs("steps/s")
        others = [_arm(rng, 100.0 * rng.choice((0.7, 1.0, 3.0)), 2, **noise).throughputs("steps/s") for _ in range(3)]
        verdicts.append(compare(baseline, arm, pooled_noise([baseline, arm, *others])).verdict)
    return verdicts


@pytest.mark.parametrize("between, within", [(0.03, 0.05), (0.01, 0.01), (0.02, 0.01), (0.03, 0.005)])
def test_pooled_noise_keeps_a_a_false_positives_at_or_below_2_percent(between, within):
    verdicts = _pooled_verdicts(random.Random(99), 1.0, 2000, between=between, within=within)
    assert verdicts.count("no-change") / len(verdicts) >= 0.98


def test_a_two_run_arm_with_a_5x_effect_is_decided_under_realistic_noise():
    rng = random.Random(5)
    verdicts = _pooled_verdicts(rng, 5.0, 500, between=0.05, within=0.05)
    assert verdicts.count("faster") / len(verdicts) >= 0.99
    # its own two runs alone (Welch, one degree of freedom) leave most such arms undecided
    alone = [_verdict(rng, 100.0, 500.0, runs=(2, 2), between=0.05, within=0.05) for _ in range(500)]
    assert alone.count("faster") / len(alone) < 0.9


def test_a_setting_noisier_than_the_rest_is_judged_by_its_own_spread():
    calm = [[100.0, 100.5], [50.0, 50.2], [70.0, 70.1], [30.0, 30.1]]
    wild = [60.0, 180.0]  # its own runs disagree 3x
    result = compare([100.0, 100.5, 99.8], wild, pooled_noise([*calm, wild]))
    assert result.verdict == "undecided"  # too wide to tell a 2x gain from a 2x loss, not a no-change


def test_throughput_is_one_value_per_run():
    arm = _arm(random.Random(0), 50.0, 3)
    assert len(arm.throughputs("steps/s")) == 3 and arm.throughputs("samples/s") == []  # samples unknown


def test_a_clear_speedup_is_found_with_an_interval_around_it():
    rng = random.Random(7)
    result = compare(_arm(rng, 14.0, 6).throughputs("steps/s"), _arm(rng, 56.0, 3).throughputs("steps/s"))
    assert result.verdict == "faster"
    assert 2.5 < result.ci[0] < result.speedup < result.ci[1] < 6.0


def test_a_slowdown_is_called_slower():
    rng = random.Random(3)
    assert _verdict(rng, 100.0, 60.0, runs=(4, 3)) == "slower"


def test_comparisons_need_two_windows_on_each_side():
    with pytest.raises(ValueError):
        compare([1.0], [1.0, 2.0])


def test_loss_drift_is_zero_for_identical_runs_and_relative_otherwise():
    assert loss_drift([2.0, 1.5, 1.0], [2.0, 1.5, 1.0]) == 0.0
    assert loss_drift([2.0, 2.0], [2.2, 1.8, 5.0]) == pytest.approx(0.1)
    assert loss_drift([], [1.0]) is None


def _measured(name: str, speedup: float, verdict: str) -> Experiment:
    return Experiment(name, {}, "steps/s", speedup, (speedup * 0.9, speedup * 1.1), verdict, None, None, "")


@pytest.mark.parametrize("combined, ceiling, recovered, shown_ceiling", [
    (_measured("combined", 2.0, "faster"), _measured("ceiling", 3.0, "faster"), 0.75, 3.0),
    (_measured("combined", 0.96, "no-change"), _measured("ceiling", 1.02, "no-change"), None, None),
    (_measured("combined", 1.5, "faster"), _measured("ceiling", 1.2, "faster"), 1.0, 1.2),  # not 200%
    (_measured("combined", 1.5, "faster"), _measured("ceiling", 1.3, "no-change"), None, None),
])
def test_the_share_of_data_loading_recovered_needs_both_verified_and_stays_within_100_percent(
        combined, ceiling, recovered, shown_ceiling):
    head = _headline([], combined, ceiling)
    assert head.data_loading_recovered_frac == (pytest.approx(recovered) if recovered is not None else None)
    assert head.ceiling_speedup == shown_ceiling
