"""Calibration: each finding's predicted speedup against what its experiment measured, on real runs of the bundled
samples and test scripts (benchmarks/calibration.py makes the same table for benchmarks/README.md). No finding may
predict more than twice what its fix measured, nor under half of it, beyond the measurement's 99% interval."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
from calibration import calibrate, markdown  # noqa: E402

# a minute of experiments each: the samples whose findings recommend a fix that runs on a CPU
CALIBRATED = (
    ("sample_runs/tiny_batch.py", ()),
    ("sample_runs/slow_loader.py", ()),
    ("sample_runs/host_overhead.py", ()),
    ("tests/scripts/calibration_mlp.py", ()),
)


@pytest.mark.slow  # four real runs with experiments, 90 s of experiments each: about eight minutes
@pytest.mark.timeout(1200)
def test_every_prediction_is_within_2x_of_what_its_experiment_measured(tmp_path):
    rows = calibrate(CALIBRATED, tmp_path, budget_s=90)
    print(markdown(rows))
    measured = [r for r in rows if r.measured is not None]
    assert len(measured) >= 3, markdown(rows)  # the samples' main findings all reach a verdict
    # off: the measurement's whole 99% interval more than 2x from the prediction, either way
    off = [r for r in measured if r.verdict in ("over-predicted", "under-predicted")]
    assert not off, markdown(rows)
