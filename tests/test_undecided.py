"""Undecided is a verdict: an experiment whose 99% interval cannot tell a 2x gain from a 2x loss decides nothing,
says what its timed windows showed, and checks no prediction. On a compiled model that recompiled inside its timed
windows an experiment read 0.58x [0.02-21.10], and the terminal said "Predictions: 1 of 1 checked by an
experiment held within 2x"."""
from __future__ import annotations

import io
from pathlib import Path

import pytest
from rich.console import Console

from diagnose.experiments.scheduler import Arm
from diagnose.experiments.stage import _result
from diagnose.model import (
    Capture,
    Change,
    Diagnosis,
    Environment,
    Experiment,
    Finding,
    Measurement,
    SteadyTiming,
)
from diagnose.optimizations.base import Context
from diagnose.report.render import render_html
from diagnose.report.terminal import print_summary
from diagnose.report.view import build_view
from diagnose.verdict.predictions import check_predictions, count_off

CHANGE = "dataloader.pin_memory"


def _window(rate: float, steps: int = 40, **shown) -> SteadyTiming:
    """A timed window of `steps` steady steps at `rate` steps/s; `shown`: what happened inside it (compiled_steps,
    compile_s, recompiles; wall_steps beyond `steps`: an epoch's start-up before it)."""
    wall_steps = shown.pop("wall_steps", steps)
    return SteadyTiming(steps=steps, seconds=steps / rate, samples=None, wall_steps=wall_steps,
                        wall_seconds=wall_steps / rate, **shown)


def _run(*windows: SteadyTiming) -> Measurement:
    return Measurement(status="completed", windows=windows, applied=(), startup_s=0.5, first_step_s=0.1, losses=(),
                       peak_memory_bytes=None, steps_seen=200)


def _arm(name: str, changes: tuple[Change, ...], runs: list[Measurement]) -> Arm:
    arm = Arm(name, {}, changes)
    arm.runs.extend(runs)
    return arm


def _context() -> Context:
    environment = Environment("3.11", "2.13.0", "linux", 2, 8 << 30, False)
    return Context(Capture("completed", "train.py", (), "optimizer", 20, 5, 3, 10.0, environment), None)


BASELINE = [_run(_window(100.0), _window(101.0)), _run(_window(100.5), _window(100.0))]


def _variant(first: dict, second: dict | None = None, rates=(40.0, 160.0)) -> list[Measurement]:
    """Two runs 4x apart in rate (their interval against the calm baseline is far wider than 4x), the first's
    second window showing `first`, the second run's `second`."""
    return [_run(_window(rates[0]), _window(rates[0] * 1.01, **first)),
            _run(_window(rates[1]), _window(rates[1] * 0.99, **(second or {})))]


# what the windows show -> the cause said, and words of the reason that give its numbers
CAUSES = [
    ({"compiled_steps": 2, "compile_s": 3.5, "recompiles": 2}, {"compiled_steps": 1, "compile_s": 1.0, "recompiles": 1},
     "recompiles", ["torch.compile recompiled inside the timed windows", "3 recompilations",
                    "2 of the variant's 2 runs"]),
    ({"compiled_steps": 1, "compile_s": 2.25}, None,
     "compiling", ["torch.compile compiled inside the timed windows", "2.2 s", "1 of the variant's 2 runs"]),
    ({"wall_steps": 46}, None,
     "epoch-restarts", ["epoch start-ups fell inside the timed span", "1 of the variant's 2 runs"]),
    ({}, None,
     "noisy-machine", ["the machine was noisy", "one run's windows lay up to 1% apart",
                       "the runs of one side up to 296%", "2 runs of the baseline and 2 of the variant"]),
]


@pytest.mark.parametrize("first, second, cause, words", CAUSES)
def test_an_interval_too_wide_to_tell_a_2x_gain_from_a_2x_loss_is_undecided_with_its_cause(first, second, cause,
                                                                                            words):
    baseline = _arm("baseline", (), BASELINE)
    variant = _arm(CHANGE, (Change(CHANGE),), _variant(first, second))
    result = _result(variant, baseline, _context())
    assert result.ci[1] / result.ci[0] >= 4 and result.ci[0] < 1 < result.ci[1]
    assert result.verdict == "undecided" and result.undecided_cause == cause
    assert result.reason.startswith("undecided: the 99% interval is too wide to tell a 2x gain from a 2x loss: ")
    for word in words:
        assert word in result.reason


def test_recompiles_in_the_baselines_windows_are_seen_too():
    baseline = _arm("baseline", (), [_run(_window(100.0), _window(101.0, compiled_steps=1, compile_s=0.4,
                                                                           recompiles=1)), BASELINE[1]])
    variant = _arm(CHANGE, (Change(CHANGE),), _variant({}))
    result = _result(variant, baseline, _context())
    assert result.undecided_cause == "recompiles" and "1 of the baseline's 2 runs" in result.reason


def test_an_interval_that_decides_says_no_cause_even_with_recompiles_in_its_windows():
    baseline = _arm("baseline", (), BASELINE)
    variant = _arm(CHANGE, (Change(CHANGE),), _variant({"recompiles": 1, "compiled_steps": 1, "compile_s": 1.0},
                                                       rates=(99.0, 101.0)))
    result = _result(variant, baseline, _context())
    assert result.verdict == "no-change" and result.undecided_cause == ""


def _finding() -> Finding:
    return Finding(rule="compile.recompiles", category="utilization", severity="high", cost_fraction=0.4, title="",
                   message="", location=None, fix="", fix_code="", optimizations=(CHANGE, "compile_dynamic"),
                   predicted_speedup=1 / 0.6)


UNDECIDED = Experiment(optimization=CHANGE, setting={}, metric="steps/s", speedup=0.58, ci=(0.02, 21.10),
                       verdict="undecided", loss_drift=None, peak_memory_bytes=None,
                       reason="undecided: the 99% interval is too wide to tell a 2x gain from a 2x loss: torch.compile "
                              "recompiled inside the timed windows: 5 recompilations in 2 of the variant's 2 runs",
                       undecided_cause="recompiles")


def test_an_undecided_experiment_checks_no_prediction():
    [check] = check_predictions((_finding(),), (UNDECIDED,), {})
    assert check.verdict == "undecided" and check.undecided_cause == "recompiles"
    assert check.experiment == CHANGE and check.ratio is None
    assert count_off((check,)) == 0
    # beside a decided experiment of the same finding, the decided one checks it, however wide the other
    decided = Experiment(optimization="compile_dynamic", setting={}, metric="steps/s", speedup=1.5, ci=(1.4, 1.6),
                         verdict="faster", loss_drift=None, peak_memory_bytes=None, reason="")
    [check] = check_predictions((_finding(),), (UNDECIDED, decided), {})
    assert check.verdict == "agrees" and check.experiment == "compile_dynamic"


def _diagnosis(experiments: tuple[Experiment, ...]) -> Diagnosis:
    finding = _finding()
    predictions = check_predictions((finding,), experiments, {})
    return Diagnosis(schema=1, script="train.py", steps_profiled=1, step_time_s={"mean": 0.1, "p50": 0.1, "p95": 0.1},
                     breakdown={}, findings=(finding,), experiments=experiments, predictions=predictions,
                     predictions_off=count_off(predictions))


def _terminal(diagnosis: Diagnosis, tmp_path: Path) -> str:
    console = Console(file=io.StringIO(), width=200, record=True, color_system=None)
    print_summary(console, diagnosis, "verdict", "completed", tmp_path, None)
    return console.export_text()


def test_the_terminal_says_undecided_with_its_cause_and_counts_no_check(tmp_path):
    text = _terminal(_diagnosis((UNDECIDED,)), tmp_path)
    assert "checked by an experiment held within 2x" not in text
    assert ("Predictions: none checked by an experiment; 1 left undecided by an experiment too wide to check it "
            "(torch.compile recompiled inside the timed windows).") in text
    line = next(x for x in text.splitlines() if x.strip().startswith("undecided") and CHANGE in x)
    assert "0.58x" in line
    assert "torch.compile recompiled inside the timed windows: 5 recompilations" in text
    assert ("measured 0.58x [0.02-21.10]: undecided (torch.compile recompiled inside the timed windows), too wide to "
            "check the prediction") in text


def test_the_report_says_undecided_with_its_cause(tmp_path):
    html = render_html(build_view(tmp_path, None, None, _diagnosis((UNDECIDED,)), None))
    assert '<span class="badge undecided">undecided</span>' in html
    assert "torch.compile recompiled inside the timed windows: 5 recompilations" in html
    assert "1 left undecided by an experiment too wide to check it" in html


def test_a_compiled_models_whole_run_and_break_even_build_on_no_undecided_interval():
    from dataclasses import replace

    from diagnose.verdict.compile_cost import _eager_step, _trial

    dynamic = replace(UNDECIDED, optimization="compile_dynamic", compile_s=2.0, baseline_compile_s=2.0)
    trial = _trial(dynamic, step_s=0.01, run_steps=1000)
    assert trial.run_speedup_ci[1] / trial.run_speedup_ci[0] >= 4 and trial.run_verdict == "undecided"
    step_s, notes = _eager_step([replace(UNDECIDED, optimization="compile_eager")], 0.01)
    assert step_s is None and "no break-even" in notes[0] and "undecided" in notes[0]


def test_an_undecided_prediction_is_counted_apart_from_the_checked_ones():
    from diagnose.model import PredictionCheck
    from diagnose.report.wording import predictions_sentence

    checks = (PredictionCheck("a", 1.5, "compile", 1.4, (1.3, 1.5), "agrees", 1.07),
              PredictionCheck("b", 2.0, "amp", 0.9, (0.2, 4.0), "undecided", undecided_cause="noisy-machine"))
    diagnosis = replace_predictions(_diagnosis(()), checks)
    assert predictions_sentence(diagnosis) == ("Predictions: 1 of 1 checked by an experiment held within 2x; 1 left "
                                               "undecided by an experiment too wide to check it (a noisy machine).")


def replace_predictions(diagnosis: Diagnosis, checks) -> Diagnosis:
    from dataclasses import replace

    return replace(diagnosis, predictions=checks, predictions_off=count_off(checks))
