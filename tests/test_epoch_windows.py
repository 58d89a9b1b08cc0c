"""Timed windows for any epoch length (issue 53): epochs too short to hold a window of steady steps are timed as
whole epochs, their start-ups included as the user's run pays them; a run that ends before any window closes is
timed over the steps it ran. Real timed child processes of tests/scripts/short_epochs.py, whose steps and epoch
start-ups sleep known times."""
from __future__ import annotations

import pytest
from conftest import SCRIPTS

from diagnose.capture.runner import run_in_child
from diagnose.experiments.scheduler import TIMED_ENTRY
from diagnose.model import Measurement, MeasurePlan, RunConfig, Status
from diagnose.record.run_record import RunRecord

SHORT = SCRIPTS / "short_epochs.py"


def timed_run(folder, *script_args: str, max_seconds: float = 60, **plan) -> Measurement:
    folder.mkdir()
    plan = MeasurePlan(**{"warmup_steps": 4, "warmup_s": 0.2, "window_s": 0.3, "min_window_steps": 5,
                          "windows": 3, **plan})
    config = RunConfig(script=str(SHORT), script_args=script_args, out_dir=str(folder), warmup_steps=0,
                       profile_steps=0, max_seconds=max_seconds, measure=plan)
    run_in_child(config, folder, lambda line, is_err: None, lambda line: None, TIMED_ENTRY)
    return RunRecord(folder).measure()


def step_ms(m: Measurement) -> float:
    return 1000 * sum(w.seconds for w in m.windows) / sum(w.steps for w in m.windows)


@pytest.mark.full  # starts processes (a whole run, the CLI, a script): the full tier
def test_epochs_of_four_steps_are_timed_whole_with_their_start_up(tmp_path):
    # 4 steps of 30 ms and a 60 ms start-up an epoch: the user's run takes 45 ms a step
    m = timed_run(tmp_path / "run", "--batches", "4", "--step-ms", "30", "--restart-ms", "60")
    assert m.status == Status.COMPLETED and len(m.windows) >= 2
    assert all(w.restarts_included and w.steps % 4 == 0 for w in m.windows), m.windows
    assert step_ms(m) == pytest.approx(45, rel=0.15)


@pytest.mark.full  # a whole run, timed by nothing it asserts: the full tier (it runs beside another test)
def test_accumulation_makes_epochs_of_two_optimizer_steps_and_they_are_timed_whole(tmp_path):
    # 4 micro-batches of 30 ms, 2 to an optimizer step, and a 60 ms start-up: 2 steps of 90 ms an epoch
    m = timed_run(tmp_path / "run", "--batches", "4", "--step-ms", "30", "--restart-ms", "60", "--accumulate", "2")
    assert m.status == Status.COMPLETED and m.windows
    assert all(w.restarts_included and w.steps % 2 == 0 for w in m.windows), m.windows
    assert step_ms(m) == pytest.approx(90, rel=0.15)


@pytest.mark.full  # a whole run, timed by nothing it asserts: the full tier (it runs beside another test)
def test_long_epochs_keep_windows_of_steady_steps(tmp_path):
    m = timed_run(tmp_path / "run", "--batches", "40", "--step-ms", "10", "--restart-ms", "200")
    assert m.windows and not any(w.restarts_included for w in m.windows)
    assert step_ms(m) == pytest.approx(10, rel=0.3)  # the start-up is amortised elsewhere (wall_seconds)


@pytest.mark.full  # a whole run, timed by nothing it asserts: the full tier (it runs beside another test)
def test_a_run_that_ends_before_a_window_closes_is_timed_over_the_steps_it_ran(tmp_path):
    # epochs of 3 steps of 100 ms and a 50 ms start-up, timed whole, but a window would need 8 s: the run's time
    # limit ends it first, and its steps after the warm-up are the window (117 ms a step, start-ups included)
    m = timed_run(tmp_path / "run", "--batches", "3", "--step-ms", "100", "--restart-ms", "50", max_seconds=6,
                  window_s=8.0, warmup_steps=2, warmup_s=0.1)
    assert m.status == Status.TIMEOUT
    assert len(m.windows) == 1 and m.windows[0].restarts_included and m.windows[0].steps >= 5
    assert step_ms(m) == pytest.approx(117, rel=0.2)


def test_a_claim_says_when_its_windows_held_whole_epochs():
    from diagnose.experiments.stage import _timed_over
    from diagnose.model import SteadyTiming

    def run(*whole: bool) -> Measurement:
        windows = tuple(SteadyTiming(steps=4, seconds=0.4, samples=32, restarts_included=w) for w in whole)
        return Measurement(status=Status.COMPLETED, windows=windows, applied=(), startup_s=1.0, first_step_s=0.1,
                           losses=(), peak_memory_bytes=None, steps_seen=12)

    assert _timed_over([run(True, True), run(True)]) == "whole-epochs"
    assert _timed_over([run(True), run(False)]) == "steady-steps"  # mixed: not all of the claim holds start-ups
    assert _timed_over([]) == ""
