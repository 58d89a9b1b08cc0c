"""Training loops as people write them: with gradient accumulation a step is an optimizer step (as Hugging Face
Trainer, Lightning and nanoGPT count it), so every per-step figure, FLOPs included, covers its micro-batches.
Real runs of a nanoGPT-style loop (tests/scripts/nanogpt_like.py: no DataLoader, batches from a memmap, its own
clock per iteration) under `diagnose run`, against the script's own clock in a plain run."""
from __future__ import annotations

import re
import statistics
import subprocess
import sys

import pytest
from conftest import SCRIPTS, run_script

from diagnose.capture.session import typical_step_s

NANOGPT = SCRIPTS / "nanogpt_like.py"
OPTIONS = ("--warmup", "3", "--steps", "6", "--experiments", "none")


def _diagnosed(tmp_path, accumulation: int, iterations: int = 40):
    run = run_script(NANOGPT, "--gradient-accumulation-steps", str(accumulation), "--max-iters", str(iterations),
                     out=tmp_path / f"accumulate{accumulation}", options=OPTIONS)
    assert run.returncode == 0, run.stderr
    return run


def _own_clock_s(accumulation: int, iterations: int = 30) -> float:
    """The script's median iteration time by its own clock, run plainly (the first five left out: warm-up)."""
    done = subprocess.run([sys.executable, str(NANOGPT), "--gradient-accumulation-steps", str(accumulation),
                           "--max-iters", str(iterations)], capture_output=True, text=True, timeout=300, check=True)
    times = [float(t) / 1e3 for t in re.findall(r"time ([\d.]+)ms", done.stdout)]
    return statistics.median(times[5:])


@pytest.mark.full  # starts processes (a whole run, the CLI, a script): the full tier
def test_an_accumulating_loop_counts_optimizer_steps_of_four_micro_batches(tmp_path):
    one, four = _diagnosed(tmp_path, 1), _diagnosed(tmp_path, 4)
    d = four.diagnosis
    assert d["metrics"]["micro_batches_per_step"] == 4 and one.diagnosis["metrics"]["micro_batches_per_step"] == 1
    assert "one optimizer step = 4 micro-batches" in (four.run_dir / "report.html").read_text()
    # the FLOPs of a step are four micro-batches' (counted in a warm-up step after the first optimizer step)
    ratio = d["speed_of_light"]["flops"]["per_step"] / one.diagnosis["speed_of_light"]["flops"]["per_step"]
    assert 3.9 < ratio < 4.1, ratio
    # (its time, against the script's own clock: test_the_step_is_the_scripts_own_iteration_time, slow tier)


@pytest.mark.slow
@pytest.mark.parametrize("accumulation", [1, 4])
def test_the_step_is_the_scripts_own_iteration_time(tmp_path, accumulation):
    # the script's own clock on both sides of the run: a shared machine's speed drifts between processes
    before = _own_clock_s(accumulation)
    run = _diagnosed(tmp_path, accumulation, iterations=60)
    step = run.diagnosis["step_time_s"]["unprofiled"]
    after = _own_clock_s(accumulation)
    assert 0.8 * min(before, after) < step < 1.2 * max(before, after), (step, before, after)


def _boundaries(durations):
    marks = [0.0]
    for d in durations:
        marks.append(marks[-1] + d)
    return marks


def test_the_plan_reads_a_plain_step_not_a_stalled_or_instrumented_one():
    """The warm-up's step estimate decides how many steps fit --max-seconds: one stall on a loaded machine (3 s
    among 50 ms steps) or the FLOP-counted second step must not cut the profiled steps; long steps stay long."""
    assert typical_step_s(_boundaries([0.4, 0.9, 0.05, 0.05, 3.0])) == pytest.approx(0.05)
    assert typical_step_s(_boundaries([0.4, 0.9, 0.05, 3.0, 3.0, 3.0])) == pytest.approx(3.0)  # slow from now on
    assert typical_step_s(_boundaries([0.4, 0.9])) == pytest.approx(0.4)  # no plain step yet: the quicker
    assert typical_step_s(_boundaries([2.5])) == pytest.approx(2.5)
    assert typical_step_s(_boundaries([2.6, 2.5, 2.4])) == pytest.approx(2.4)


LONG = SCRIPTS / "long_steps.py"  # three L-BFGS steps of about 2.5 s


@pytest.mark.slow  # long (a whole run or several): the slow tier
def test_three_long_optimizer_steps_get_a_diagnosis_with_the_defaults(tmp_path):
    run = run_script(LONG, out=tmp_path / "run", options=("--experiments", "none"))  # warm-up 5, 20 steps, 60 s
    assert run.returncode == 0, run.stderr
    d = run.diagnosis
    assert d["steps_profiled"] == 2 and d["step_time_s"]["mean"] > 1.5, d["step_time_s"]
    assert re.search(r"[Ss]teps take about \d+\.\d s: 0 warm-up and \d+ profiled step\(s\) fit --max-seconds 60",
                     run.stderr), run.stderr[-2000:]
    assert d["findings"], "a diagnosis, not 'no training step was measured'"


@pytest.mark.slow  # long (a whole run or several): the slow tier
def test_when_not_even_two_long_steps_fit_the_message_names_the_options_that_do(tmp_path):
    run = run_script(LONG, out=tmp_path / "run", options=("--experiments", "none", "--max-seconds", "5"))
    match = re.search(r"[Ss]teps take about (\d+\.\d) s: .*run with --warmup 1 --steps 2 --max-seconds (\d+)",
                      run.stderr)
    assert match, run.stderr[-2000:]
    # --max-seconds counts from the first step: a warm-up step, 3 timed, two profiled at twice the cost, one for
    # the trace
    assert float(match.group(1)) > 1.5 and int(match.group(2)) >= 9 * float(match.group(1))
