"""compare on live runs: re-runs of one script read no-change, and a model with twice the FLOPs compared live lands
near the ratio interleaved plain runs measure, its interval holding it. Real `diagnose run` processes of
tests/scripts/calibration_mlp.py (benchmarks/run_noise.py repeats the same over more trials)."""
from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

import pytest
from conftest import SCRIPTS, run_script

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
from run_noise import plain_step_s  # noqa: E402

MLP = SCRIPTS / "calibration_mlp.py"
RUN = ("--experiments", "none")


@pytest.mark.bench  # six runs and five comparisons: about two minutes; the bench tier: not in CI
@pytest.mark.timeout(900)
def test_reruns_of_one_script_compared_five_times_stay_no_change(tmp_path):
    base = run_script(MLP, out=tmp_path / "base", options=RUN)
    assert base.returncode == 0, base.stderr
    verdicts = []
    for trial in range(5):
        again = run_script(MLP, out=tmp_path / f"again{trial}", options=(*RUN, "--baseline", str(base.run_dir)))
        assert again.returncode == 0, again.stderr
        step = json.loads((again.run_dir / "compare.json").read_text())["step"]
        verdicts.append((step["verdict"], round(step["ratio"], 3), [round(x, 3) for x in step["ci"]],
                         step["run_noise_source"]))
    assert all(v[0] == "no-change" for v in verdicts), verdicts


@pytest.mark.slow  # two runs and six plain ones, interleaved: about two minutes
@pytest.mark.timeout(900)
def test_a_model_with_twice_the_flops_compared_live_lands_near_the_plain_ratio(tmp_path):
    plain_a, plain_b = [], []
    for _ in range(3):
        plain_a.append(plain_step_s(str(MLP), [], 40))
        plain_b.append(plain_step_s(str(MLP), ["--width", "1536"], 40))
    truth = statistics.median(plain_b) / statistics.median(plain_a)
    a = run_script(MLP, out=tmp_path / "a", options=RUN)
    assert a.returncode == 0, a.stderr
    b = run_script(MLP, "--width", "1536", out=tmp_path / "b", options=(*RUN, "--baseline", str(a.run_dir)))
    assert b.returncode == 0, b.stderr
    step = json.loads((b.run_dir / "compare.json").read_text())["step"]
    assert 1.5 < truth < 2.6, (plain_a, plain_b)  # about 2x the FLOPs
    assert step["ci"][0] <= truth <= step["ci"][1], (step, truth)
    assert abs(step["ratio"] / truth - 1) <= 0.2, (step, truth)
