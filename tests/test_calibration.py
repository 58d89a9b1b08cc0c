"""Calibration: each finding's predicted speedup against what its experiment measured, on real runs of the bundled
samples and test scripts (benchmarks/calibration.py makes the same table for benchmarks/README.md). No finding may
predict more than twice what its fix measured, nor under half of it, beyond the measurement's 99% interval."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
from calibration import calibrate, markdown, rows_of  # noqa: E402

# a minute of experiments each, on the bench tier: the samples whose findings recommend a fix that runs on a CPU,
# besides the two whose timed runs the slow tier shares (the README's run of slow_loader.py, tiny_batch.py)
CALIBRATED = (
    ("sample_runs/host_overhead.py", ()),
    ("tests/scripts/calibration_mlp.py", ()),
)


def _shared_rows(readme_run, tiny_batch_experiments) -> list:
    rows = []
    shared = (("sample_runs/tiny_batch.py", tiny_batch_experiments), ("sample_runs/slow_loader.py", readme_run))
    for script, run in shared:
        assert run.returncode == 0, run.stderr[-3000:]
        rows += rows_of(script, run.diagnosis)
    return rows


def _assert_calibrated(rows, at_least: int) -> None:
    measured = [r for r in rows if r.measured is not None]
    assert len(measured) >= at_least, markdown(rows)  # the samples' main findings all reach a verdict
    # off: the measurement's whole 99% interval more than 2x from the prediction, either way
    off = [r for r in measured if r.verdict in ("over-predicted", "under-predicted")]
    assert not off, markdown(rows)


@pytest.mark.slow  # the timed runs other slow tests make: nothing more is run
def test_the_shared_runs_predictions_are_within_2x_of_what_their_experiments_measured(readme_run,
                                                                                       tiny_batch_experiments):
    rows = _shared_rows(readme_run, tiny_batch_experiments)
    print(markdown(rows))
    _assert_calibrated(rows, at_least=2)


@pytest.mark.bench  # two more real runs with experiments, 90 s of experiments each; the bench tier: not in CI
@pytest.mark.timeout(1200)
def test_every_prediction_is_within_2x_of_what_its_experiment_measured(tmp_path, readme_run, tiny_batch_experiments):
    rows = _shared_rows(readme_run, tiny_batch_experiments) + calibrate(CALIBRATED, tmp_path, budget_s=90)
    print(markdown(rows))
    _assert_calibrated(rows, at_least=3)
