"""The step time the user sees: steps timed before the profiled window, the profiler never started, the profiler's
overhead against it, and autocast counted only where it is enabled. Real runs of the CLI on the CPU."""
from __future__ import annotations

import json

import pytest
from conftest import SCRIPTS, TRACES, diagnose_cli, run_script

from diagnose.capture.plain_timer import PlainTimer
from diagnose.capture.step_plan import MIN_TIMED, REWARM_STEPS
from diagnose.model import Capture
from diagnose.serial import from_jsonable, to_jsonable

FAST = ("--warmup", "3", "--steps", "8", "--experiments", "none")


@pytest.fixture(scope="module")
def loop_run(tmp_path_factory):
    """tests/scripts/small_loop.py under `diagnose run`, once per set of arguments."""
    cache = {}

    def get(*script_args: str, options: tuple[str, ...] = FAST):
        if (script_args, options) not in cache:
            out = tmp_path_factory.mktemp("small_loop") / "run"
            cache[script_args, options] = run_script(SCRIPTS / "small_loop.py", *script_args, out=out, options=options)
        return cache[script_args, options]

    return get


@pytest.mark.full  # starts processes (a whole run, the CLI, a script): the full tier
def test_run_reports_the_unprofiled_step_time_and_the_profilers_overhead(sample_run):
    run = sample_run("host_overhead.py")
    assert run.returncode == 0, run.stderr
    d = run.diagnosis
    plain = d["step_time_s"]["unprofiled"]
    assert plain > 0.005  # the sample sleeps 10 ms per step
    factor = d["metrics"]["profiler_overhead_factor"]
    assert factor == pytest.approx(d["step_time_s"]["mean"] / plain)
    assert d["metrics"]["step_time_unprofiled_s"] == plain
    window = json.loads((run.run_dir / "capture.json").read_text())["unprofiled_window"]
    assert window["steps"] >= 3 and window["device_synced"] is False  # a CPU run: no device queue
    assert (f"step {plain * 1e3:.1f} ms:" in run.stderr
            and f"Timed {window['steps']} steps without the profiler after 3 warm-up steps, then profiled"
            in run.stderr)
    assert f"profiler overhead {factor:.1f}x (profiled step {d['step_time_s']['mean'] * 1e3:.1f} ms)" in run.stderr
    html = (run.run_dir / "report.html").read_text()
    assert f"Step {plain * 1e3:.1f} ms, timed without the profiler" in html and "Profiler overhead" in html


@pytest.mark.slow  # long (a whole run or several): the slow tier
def test_a_script_that_ends_inside_the_timed_window_says_how_many_steps_fit(loop_run):
    run = loop_run("--steps", "7")  # 6 step boundaries: 3 warm-up, then 3 of the 8 steps to time (as many as profiled)
    assert run.returncode == 0, run.stderr
    d = run.diagnosis
    assert d["status"] == "script_finished" and d["steps_profiled"] == 0
    assert d["step_time_s"]["unprofiled"] is None  # never a partial window
    assert "give the script more steps (iterations or data) to profile" in run.stderr
    # one step more: still inside the timed window, but 1 warm-up, 3 timed and 2 profiled steps, and the boundary
    # that ends the last, fit its 7 boundaries: run runs it again so, and diagnoses that
    run = loop_run("--steps", "8")
    assert run.returncode == 0, run.stderr
    assert "finished after 7 steps, before any was profiled: running it again with --warmup 1 --steps 2" in " ".join(
        run.stderr.split())
    capture = json.loads((run.run_dir / "capture.json").read_text())
    assert (capture["warmup_steps"], capture["steps_profiled"], capture["unprofiled_window"]["steps"]) == (1, 2, 3)
    assert run.diagnosis["status"] == "completed" and run.diagnosis["steps_profiled"] == 2
    assert run.diagnosis["findings"] and run.diagnosis["step_time_s"]["mean"] > 0
    assert len(list((run.run_dir / "tb").iterdir())) == 1  # the first attempt's trace (no step in it) is gone
    samples = json.loads((run.run_dir / "samples.json").read_text())
    assert capture["wall_s"] < 60 and samples  # (written by the second attempt, as the capture was)


@pytest.mark.full  # starts processes (a whole run, the CLI, a script): the full tier
def test_a_script_that_ends_inside_the_profiled_window_keeps_its_timed_steps(loop_run):
    run = loop_run("--steps", "15")  # 3 warm-up + 8 timed (as many as are profiled), then 4 of the 8 to profile
    assert run.returncode == 0, run.stderr
    d = run.diagnosis
    assert d["status"] == "script_finished" and 1 <= d["steps_profiled"] < 8
    window = json.loads((run.run_dir / "capture.json").read_text())["unprofiled_window"]
    assert window["steps"] == 8 and d["step_time_s"]["unprofiled"] == pytest.approx(window["seconds"] / 8)
    ends = window["step_ends_s"]  # each step's end, for the blocks compare measures the run's own spread with
    assert len(ends) == 8 and ends == sorted(ends) and ends[-1] == pytest.approx(window["seconds"])
    assert "profiler overhead" in run.stderr


def test_analyze_has_no_unprofiled_step_time(tmp_path):
    proc = diagnose_cli("analyze", str(TRACES / "cpu_only_with_dataloader.json.gz"), "--out", str(tmp_path / "out"))
    assert proc.returncode == 0, proc.stderr
    d = json.loads((tmp_path / "out" / "diagnosis.json").read_text())
    assert "unprofiled" in d["step_time_s"] and d["step_time_s"]["unprofiled"] is None
    assert "profiled step " in proc.stderr and "profiler overhead" not in proc.stderr
    html = (tmp_path / "out" / "report.html").read_text()
    assert "Profiled mean step" in html and "timed without the profiler" not in html


@pytest.mark.full  # starts processes (a whole run, the CLI, a script): the full tier
def test_autocast_entered_disabled_is_not_counted(loop_run):
    run = loop_run("--autocast", "off")
    assert run.returncode == 0, run.stderr
    assert run.diagnosis["metrics"]["autocast_used"] == 0
    assert run.diagnosis["step_time_s"]["unprofiled"] > 0
    capture = json.loads((run.run_dir / "capture.json").read_text())
    assert capture["autocast_dtypes"] == [] and capture["counters"]["autocast_disabled"] > 0


@pytest.mark.full  # starts processes (a whole run, the CLI, a script): the full tier
def test_enabled_autocast_is_counted_with_its_dtype(loop_run):
    run = loop_run("--autocast", "bf16")
    assert run.returncode == 0, run.stderr
    assert run.diagnosis["metrics"]["autocast_used"] == 1
    assert json.loads((run.run_dir / "capture.json").read_text())["autocast_dtypes"] == ["bfloat16"]


def test_timer_closes_at_the_step_count_or_once_past_its_time_budget():
    by_count = PlainTimer(steps=4, budget_s=None)  # after REWARM_STEPS steps left out
    assert [by_count.boundary() is None for _ in range(REWARM_STEPS + 3)] == [True] * 5
    window = by_count.boundary()
    assert window.steps == 4 and window.seconds > 0 and window.device_synced is False
    by_time = PlainTimer(steps=20, budget_s=0.0, rewarm_steps=0)  # already past its budget: 3 steps
    assert by_time.boundary() is None and by_time.boundary() is None
    assert by_time.boundary().steps == MIN_TIMED


@pytest.mark.full  # starts processes (a whole run, the CLI, a script): the full tier
def test_a_capture_written_before_the_unprofiled_window_still_loads(sample_run):
    data = json.loads((sample_run("host_overhead.py").run_dir / "capture.json").read_text())
    for added in ("unprofiled_window", "autocast_dtypes"):
        del data[added]
    capture = from_jsonable(Capture, data)
    assert capture.unprofiled_window is None and capture.autocast_dtypes == ()
    assert from_jsonable(Capture, to_jsonable(capture)) == capture


@pytest.mark.full  # starts processes (a whole run, the CLI, a script): the full tier
def test_amp_is_tried_when_autocast_was_only_entered_disabled(loop_run):
    from diagnose.optimizations.amp import Amp
    from diagnose.optimizations.base import Context
    from diagnose.serial import read_json

    def skip(*script_args):
        capture = read_json(loop_run(*script_args).run_dir / "capture.json", Capture)
        return Amp().skip_reason(Context(capture, analysis=None))

    assert skip("--autocast", "off") is None
    assert skip("--autocast", "bf16") == "the script already runs under autocast (bfloat16)"


def test_an_epoch_ending_inside_the_unprofiled_window_is_not_timed_as_a_step():
    timer = PlainTimer(20, None, rewarm_steps=0)
    for _ in range(4):
        assert timer.boundary() is None
    window = timer.epoch_started()  # the epoch's last step has just finished: 5 steps timed, then the epoch ends
    assert window is not None and window.steps == 5
    short = PlainTimer(20, None, rewarm_steps=0)
    short.boundary()
    assert short.epoch_started() is None  # too few steps: timing starts again after the new epoch's start-up
    assert short.start is None and short.rewarm_left == REWARM_STEPS


def test_with_loader_workers_the_window_holds_whole_bursts_after_the_backlog():
    """8 workers, 2 batches prefetched each: the 16 steps served from the batches prefetched while a slow step ran
    are not timed (nor the 2 re-warm-up steps), and the window holds whole bursts of 8."""
    timer = PlainTimer(steps=20, budget_s=None, burst=8, backlog=16)
    for _ in range(REWARM_STEPS + 16):
        assert timer.start is None and timer.boundary() is None
    assert timer.start is not None
    windows = [timer.boundary() for _ in range(24)]
    assert windows[:-1] == [None] * 23 and windows[-1].steps == 24  # 20 rounded up to whole bursts


def test_a_window_cut_by_the_time_budget_still_holds_two_whole_bursts():
    timer = PlainTimer(steps=20, budget_s=0.0, rewarm_steps=0, burst=4)
    assert [timer.boundary() for _ in range(7)] == [None] * 7
    assert timer.boundary().steps == 8


def test_epochs_that_keep_restarting_the_window_make_it_give_up():
    """A script that makes a new iterator every step (or epochs shorter than the window) never lets it close: past
    twice its planned length the timing is given up, so that the profile still comes."""
    timer = PlainTimer(5, None, rewarm_steps=0)
    for _ in range(2 * 5 - 1):
        assert timer.boundary() is None and timer.epoch_started() is None and not timer.given_up
    assert timer.boundary() is None and timer.given_up


def test_an_epoch_end_inside_a_burst_restarts_the_window():
    timer = PlainTimer(20, None, rewarm_steps=0, burst=4)
    for _ in range(4):
        timer.boundary()
    assert timer.epoch_started() is None and timer.start is None  # 5 steps: not whole bursts of 4


def _plain_step_s(num_workers: int) -> float:
    """slow_loader.py run plainly with `num_workers`: the time per step inside its second epoch (steps 140 to 230 of
    120-step epochs, by its own log lines), away from the epoch's worker start-up."""
    import sys

    from conftest import SAMPLES, logged_step_times

    seen = logged_step_times([sys.executable, "-u", str(SAMPLES / "slow_loader.py"), "--num-workers",
                              str(num_workers), "--epochs", "2", "--log-every", "10"])
    return (seen[230] - seen[140]) / 90


@pytest.mark.slow
def test_with_eight_workers_the_unprofiled_step_is_a_long_plain_runs(tmp_path):
    """Workers deliver batches in bursts of 8 and fill their queue while the trace is written: the window starts
    after that backlog and holds whole bursts, so the step is the loader's pace, not the backlog's."""
    from conftest import SAMPLES

    before = _plain_step_s(8)  # plain runs on either side in time: the machine's pace while diagnose ran
    run = run_script(SAMPLES / "slow_loader.py", "--num-workers", "8", out=tmp_path / "run",
                     options=("--warmup", "3", "--steps", "8", "--experiments", "none"))
    after = _plain_step_s(8)
    assert run.returncode == 0, run.stderr
    window = json.loads((run.run_dir / "capture.json").read_text())["unprofiled_window"]
    assert window["steps"] % 8 == 0, window
    step = run.diagnosis["step_time_s"]["unprofiled"]
    assert 0.9 * min(before, after) <= step <= 1.1 * max(before, after), (step, before, after)
