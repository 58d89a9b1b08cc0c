"""Compiled models: what dynamo did, read from its own records while code runs (in process, on torch's "eager"
backend: dynamo traces, breaks and recompiles as with inductor, without inductor's minutes of compiling), and a
recorded compiled run's trace and capture diagnosed as `diagnose run` does (tests/data/runs/compiled_branch)."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch

from diagnose import rules as rule_engine
from diagnose.analysis.analyze import Inputs, analyze
from diagnose.capture.dynamo import DynamoWatch
from diagnose.model import Capture
from diagnose.optimizations import REGISTRY
from diagnose.serial import read_json
from diagnose.trace import load_trace

RECORDED = Path(__file__).resolve().parent / "data" / "runs" / "compiled_branch"
THIS_FILE = str(Path(__file__).resolve())


@pytest.fixture
def watch():
    torch._dynamo.reset()
    watching = DynamoWatch()
    stop = watching.install()
    yield watching
    stop()
    torch._dynamo.reset()


def _branching(x):
    h = torch.relu(x)
    if h.mean().item() > 0.0:  # the break
        h = h * 2
    return h.sum()


def test_a_data_dependent_branch_is_read_as_a_graph_break_at_its_line_with_its_reason(watch):
    compiled = torch.compile(_branching, backend="eager")
    watch.on_compile_call({"backend": "eager"}, f"{THIS_FILE}:1")
    for step in range(3):
        compiled(torch.randn(8, 4))
        watch.on_step(step + 1)
    record = watch.compilation()
    [graph_break] = record.graph_breaks
    assert graph_break.location == f"{THIS_FILE}:{_branching.__code__.co_firstlineno + 2}"
    assert graph_break.function == "_branching"
    assert "item()" in graph_break.reason and graph_break.code.startswith("GB")
    assert graph_break.frame_ids == (0,)  # the frame whose graph it ended: the trace's "Torch-Compiled Region: 0/.."
    frames = {e.frame for e in record.events}
    assert "_branching" in frames and any(f.startswith("torch_dynamo_resume_in__branching") for f in frames)
    assert record.backend == "eager" and record.torch_version == torch.__version__


def _sequence_model(tokens):
    return torch.tanh(tokens.float()).mean(dim=1).sum()


def test_new_lengths_under_dynamic_false_recompile_until_the_limit_then_run_eagerly(watch):
    compiled = torch.compile(_sequence_model, backend="eager", dynamic=False)
    watch.on_compile_call({"dynamic": False}, None)
    limit = torch._dynamo.config.recompile_limit
    for step, length in enumerate(range(5, 5 + limit + 3)):
        compiled(torch.ones(4, length))
        watch.on_step(step + 1)
    record = watch.compilation()
    recompiles = [e for e in record.events if e.is_recompile]
    assert len(recompiles) == limit - 1  # the first compile, then one per new length up to the limit
    assert "size mismatch at index 1" in recompiles[0].recompile_reason
    assert [e.step for e in recompiles] == list(range(1, limit))  # each in the step that met its length
    assert record.eager_after_limit and "_sequence_model" in record.eager_after_limit[0]
    assert record.dynamic is False and record.recompile_limit == limit


def test_recompile_sites_name_the_guard_variable_and_dimension(watch):
    from diagnose.analysis.compiled import recompile_sites

    compiled = torch.compile(_sequence_model, backend="eager", dynamic=False)
    for step, length in enumerate(range(5, 9)):
        compiled(torch.ones(4, length))
        watch.on_step(step + 1)
    [site] = recompile_sites(watch.compilation())
    assert (site.frame, site.count, site.variable, site.dimension) == ("_sequence_model", 3, "tokens", 1)
    assert site.guard.startswith("tensor 'tokens' size mismatch at index 1") and not site.eager_after_limit


def test_a_clean_compiled_function_has_no_break_and_no_recompile(watch):
    compiled = torch.compile(lambda x: (x * 2).relu().sum(), backend="eager")
    for step in range(4):
        compiled(torch.randn(8, 4))
        watch.on_step(step + 1)
    record = watch.compilation()
    assert record.graph_breaks == () and not any(e.is_recompile for e in record.events)
    assert len(record.events) == 1 and record.events[0].step == 0


def test_nothing_compiled_gives_no_record(watch):
    torch.relu(torch.randn(3))
    assert watch.compilation() is None


# -- a recorded run of sample_runs/compiled_branch.py (its capture.json and trace), diagnosed in process ----------

@pytest.fixture(scope="module")
def branch_run():
    capture = read_json(RECORDED / "capture.json", Capture)
    analysis = analyze(Inputs(trace=load_trace(next(RECORDED.glob("*.json.gz"))), capture=capture))
    findings = rule_engine.findings_for(analysis, rule_engine.load_rules(optimization_ids=REGISTRY))
    return capture, analysis, {f.rule: f for f in findings}


def test_the_recorded_branch_names_its_break_line_reason_frequency_and_the_recompile_it_causes(branch_run):
    capture, analysis, findings = branch_run
    finding = findings["compile.graph-break"]
    assert finding.location.endswith("compiled_branch.py:28")
    assert "Unsupported Tensor.item() call" in finding.message and "met 1 time(s) per step" in finding.message
    assert "recompiled 1 time(s)" in finding.message  # the float read back is guarded: the resumed frame recompiles
    assert finding.prediction_bound == "lower" and finding.predicted_speedup > 1
    assert analysis.metrics["compile_graphs_per_step"] == 2.0
    assert 0 < analysis.metrics["compile_break_frac"] < analysis.metrics["compile_eager_frac"]
    [site] = analysis.compiled.recompiles
    assert site.variable == "a value read back at a graph break" and site.count == 1
    assert "compile.recompiles" not in findings  # one recompilation as the value became symbolic: not a storm


def test_the_recorded_branch_is_not_offered_torch_compile_again(branch_run):
    from diagnose.optimizations.base import Context

    capture, analysis, _ = branch_run
    reason = REGISTRY["compile"].skip_reason(Context(capture=capture, analysis=analysis))
    assert reason.startswith("the script already compiles its model at ")
