"""The statistics behind every speedup claim: A/A comparisons must say no-change, real effects must show."""
from __future__ import annotations

import random

import pytest

from diagnose.experiments.stats import compare, loss_drift


def _noisy_windows(rng: random.Random, mean: float, runs: int, windows: int = 3) -> list[float]:
    """Throughputs of timed windows: a per-run offset (process luck) plus per-window noise, and rare stalls."""
    values = []
    for _ in range(runs):
        run_offset = rng.gauss(0, 0.03)
        for _ in range(windows):
            stall = 0.6 if rng.random() < 0.03 else 1.0
            values.append(mean * (1 + run_offset) * (1 + rng.gauss(0, 0.05)) * stall)
    return values


def test_a_a_comparisons_on_noisy_timings_report_no_change_at_least_95_percent_of_the_time():
    rng = random.Random(1234)
    trials = 2000
    verdicts = [compare(_noisy_windows(rng, 100.0, 6), _noisy_windows(rng, 100.0, 2)).verdict for _ in range(trials)]
    assert verdicts.count("no-change") / trials >= 0.95


def test_a_clear_speedup_is_found_with_an_interval_around_it():
    rng = random.Random(7)
    result = compare(_noisy_windows(rng, 14.0, 6), _noisy_windows(rng, 56.0, 2))
    assert result.verdict == "faster"
    assert 3.2 < result.ci[0] < result.speedup < result.ci[1] < 5.0


def test_a_slowdown_is_called_slower():
    rng = random.Random(3)
    assert compare(_noisy_windows(rng, 100.0, 4), _noisy_windows(rng, 60.0, 3)).verdict == "slower"


def test_comparisons_need_two_windows_on_each_side():
    with pytest.raises(ValueError):
        compare([1.0], [1.0, 2.0])


def test_loss_drift_is_zero_for_identical_runs_and_relative_otherwise():
    assert loss_drift([2.0, 1.5, 1.0], [2.0, 1.5, 1.0]) == 0.0
    assert loss_drift([2.0, 2.0], [2.2, 1.8, 5.0]) == pytest.approx(0.1)
    assert loss_drift([], [1.0]) is None
