"""Compiled scripts run whole by `diagnose run` (inductor on the CPU: each compiles for tens of seconds with the run's
own empty cache, so they are in the slow tier): what the diagnosis says of a graph break, of recompilations to the
limit, and of a compiled model that is fine."""
from __future__ import annotations

import pytest
from conftest import SAMPLES, SCRIPTS, line_of, run_script

COMPILE_RULES = ("compile.graph-break", "compile.recompiles", "compile.slow-compile")


def _rules(run) -> dict[str, dict]:
    return {f["rule"]: f for f in run.findings}


@pytest.mark.full  # a whole run, timed by nothing it asserts: the full tier (it runs beside another test)
def test_a_data_dependent_branch_is_named_with_its_line_reason_frequency_and_recompile(tmp_path):
    script = SAMPLES / "compiled_branch.py"
    run = run_script(script, out=tmp_path / "run", options=("--warmup", "5", "--steps", "10", "--experiments", "none"),
                     timeout=600)
    assert run.returncode == 0, run.stderr
    finding = _rules(run)["compile.graph-break"]
    assert finding["location"].endswith(f"compiled_branch.py:{line_of(script, 'if h.mean().item() > 0.0:  #')}")
    assert "Unsupported Tensor.item() call" in finding["message"] and "met 1 time(s) per step" in finding["message"]
    assert finding["prediction_bound"] == "lower"
    compilation = run.diagnosis["compilation"]
    assert compilation["graph_breaks"] == 1 and compilation["cache"] == "cold"  # the run's own, empty, cache
    assert compilation["compile_s"] > 0 and compilation["split_s"]["inductor"] > 0
    assert "Compiling (torch " in run.stderr and "graph break(s)" in run.stderr
    capture = run.run_dir / "capture.json"
    assert '"eager_after_limit": []' in capture.read_text()


@pytest.mark.full  # a whole run, timed by nothing it asserts: the full tier (it runs beside another test)
def test_a_compiled_model_that_is_fine_gets_no_compile_finding(tmp_path):
    run = run_script(SCRIPTS / "compiles.py", "--epochs", "2000", out=tmp_path / "run",
                     options=("--warmup", "5", "--steps", "10", "--experiments", "none"), timeout=600)
    assert run.returncode == 0, run.stderr
    assert not [f["rule"] for f in run.findings if f["rule"] in COMPILE_RULES], run.findings
    assert run.diagnosis["metrics"]["compile_graphs_per_step"] == 1.0
    assert run.diagnosis["compilation"]["recompiles"] == 0


@pytest.mark.slow
def test_new_lengths_under_dynamic_false_are_named_and_dynamic_shapes_are_measured(tmp_path):
    script = SAMPLES / "compiled_lengths.py"
    run = run_script(script, out=tmp_path / "run", timeout=900,
                     options=("--experiments", "compile_dynamic", "--budget-seconds", "200"))
    assert run.returncode == 0, run.stderr
    finding = _rules(run)["compile.recompiles"]
    assert "dimension 1 of tokens changes" in finding["message"] and "runs eagerly" in finding["message"]
    assert finding["location"].endswith(f"compiled_lengths.py:{line_of(script, 'dynamic=False)')}")
    [experiment] = [e for e in run.diagnosis["experiments"] if e["optimization"] == "compile_dynamic"]
    # measured; its windows may hold recompilations that leave the interval undecided, which then says why
    assert experiment["setting"] == {"dynamic": None}
    assert experiment["verdict"] in ("faster", "slower", "no-change", "undecided")
    assert (experiment["undecided_cause"] != "") == (experiment["verdict"] == "undecided")
    assert experiment["compile_s"] is not None and experiment["baseline_compile_s"] is not None
    [trial] = run.diagnosis["compilation"]["trials"]
    assert trial["run_speedup"] is not None and trial["run_verdict"] in ("faster", "slower", "no-change", "undecided")
