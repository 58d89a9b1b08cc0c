"""A profiled window inside a training run that goes on: diagnose.window in a hand-written loop, the Hugging Face
and Lightning callbacks, several ranks. Each trains a tiny model twice from the same seed (without, then with the
window) in a real subprocess: the window is diagnosed, and training reaches its last step with the same loss."""
from __future__ import annotations

import json
import subprocess
import sys
import timeit

import pytest
from conftest import SCRIPTS

import diagnose


def _train(tmp_path, script: str, *args: str, timeout: float = 300) -> dict:
    done = subprocess.run([sys.executable, str(SCRIPTS / script), str(tmp_path / "run"), *args], cwd=tmp_path,
                          capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def _assert_diagnosed_and_trained_on(tmp_path, outcome: dict, steps: int, last_step: int) -> None:
    assert outcome["loss_window"] == pytest.approx(outcome["loss_plain"], rel=1e-6)
    assert outcome["last_step"] == last_step
    assert outcome["steps_profiled"] == steps and outcome["exit_code"] == 0
    run = tmp_path / "run"
    assert (run / "report.html").exists() and (run / "diagnosis.json").exists()
    assert len(list((run / "tb").glob("rank0.*.pt.trace.json"))) == 1


@pytest.mark.full  # starts processes (a whole run, the CLI, a script): the full tier
def test_a_window_at_a_step_of_a_hand_written_loop(tmp_path):
    outcome = _train(tmp_path, "window_loop.py", "at")
    assert outcome["first_profiled"] == 100
    _assert_diagnosed_and_trained_on(tmp_path, outcome, steps=5, last_step=119)


@pytest.mark.slow  # asserts on what it timed: the slow tier, where nothing runs beside it
def test_a_window_opens_when_steps_slow_down(tmp_path):
    outcome = _train(tmp_path, "window_loop.py", "slower")
    assert 71 <= outcome["first_profiled"] <= 76, "steps slow down from step 70; the window opens soon after"
    _assert_diagnosed_and_trained_on(tmp_path, outcome, steps=5, last_step=119)
    assert "host overhead" in outcome["verdict"]  # the slow steps wait in Python (a sleep), not in torch


def test_the_step_call_outside_the_window_costs_microseconds():
    window = diagnose.window(at_step=10**9, quiet=True)
    per_call_s = min(timeit.repeat(window.step, number=20_000, repeat=5)) / 20_000
    assert per_call_s < 20e-6, f"{per_call_s * 1e6:.1f} us a step: over 1% of a 2 ms step"


def test_a_window_needs_a_trigger_and_a_positive_step_count():
    with pytest.raises(diagnose.UserError, match="at_step or when_slower"):
        diagnose.window(steps=5)
    with pytest.raises(diagnose.UserError, match="steps=0"):
        diagnose.window(at_step=10, steps=0)


@pytest.mark.full  # starts processes (a whole run, the CLI, a script): the full tier
def test_lightning_callback_diagnoses_a_window_at_step_200(tmp_path):
    pytest.importorskip("lightning", reason="Lightning is not installed (pip install '.[frameworks]')")
    outcome = _train(tmp_path, "lightning_window.py")
    _assert_diagnosed_and_trained_on(tmp_path, outcome, steps=10, last_step=240)


@pytest.mark.full  # a whole run, timed by nothing it asserts: the full tier (it runs beside another test)
def test_hugging_face_callback_diagnoses_a_window_at_step_200(tmp_path):
    pytest.importorskip("transformers", reason="transformers is not installed (pip install '.[frameworks]')")
    outcome = _train(tmp_path, "hf_window.py", timeout=600)
    _assert_diagnosed_and_trained_on(tmp_path, outcome, steps=10, last_step=240)


@pytest.mark.full  # a whole run, timed by nothing it asserts: the full tier (it runs beside another test)
def test_each_rank_writes_its_trace_and_rank_0_the_report(tmp_path):
    done = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--standalone",
                           str(SCRIPTS / "window_ranks.py"), str(tmp_path / "run")], cwd=tmp_path,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    outcome = json.loads(done.stdout.strip().splitlines()[-1])
    assert outcome["ranks"] == 2 and outcome["steps_profiled"] == 3 and outcome["exit_code"] == 0
    assert sorted(p.name.split(".")[0] for p in (tmp_path / "run" / "tb").iterdir()) == ["rank0", "rank1"]
