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
    watching._hook_dynamo()  # as at the script's first torch.compile call
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


def _experiment(optimization: str, setting: dict, speedup: float, ci: tuple, **times):
    from diagnose.model import Experiment

    return Experiment(optimization=optimization, setting=setting, metric="steps/s", speedup=speedup, ci=ci,
                      verdict="faster" if ci[0] > 1 else "slower" if ci[1] < 1 else "no-change", loss_drift=None,
                      peak_memory_bytes=None, reason="", **times)


def test_break_even_and_the_whole_run_come_from_the_experiments_and_compile_times(branch_run):
    from diagnose.model import ExperimentResults, stated_step_s
    from diagnose.verdict.compile_cost import compile_summary

    capture, analysis, _ = branch_run
    eager = _experiment("compile_eager", {}, 0.5, (0.45, 0.55), compile_s=None, baseline_compile_s=2.0,
                        first_step_s=3.0, baseline_first_step_s=5.0)
    dynamic = _experiment("compile_dynamic", {"dynamic": True}, 1.1, (1.0, 1.2), compile_s=1.0,
                          baseline_compile_s=2.0, first_step_s=4.0, baseline_first_step_s=5.0)
    summary = compile_summary(capture, analysis, ExperimentResults(experiments=(eager, dynamic)))
    step = stated_step_s(analysis.step_time_s)
    assert summary.cache == "cold" and summary.cold_s == summary.compile_s  # the run's own, empty, cache
    assert summary.warm_s == 2.0  # the timed runs after it, the cache filled
    assert summary.eager_step_s == pytest.approx(step / 0.5)  # eager runs at half the compiled steps/s
    assert summary.break_even_steps == pytest.approx(2.0 / (step / 0.5 - step))
    trial = next(t for t in summary.trials if t.optimization == "compile_dynamic")
    steps = capture.run_length.total_steps
    assert trial.run_speedup == pytest.approx((steps * step + 5.0 + 2.0) / (steps * step / 1.1 + 4.0 + 1.0))
    assert trial.run_speedup_ci[0] < trial.run_speedup < trial.run_speedup_ci[1]


def test_warm_up_goes_on_while_recent_steps_compiled_and_within_its_bound():
    from diagnose.capture.dynamo import COMPILE_SETTLE_STEPS
    from diagnose.model import CompileEvent

    watch = DynamoWatch()
    watch._events = [CompileEvent(compile_id="0/0", frame="forward", location=None, step=0, seconds=9.0),
                     CompileEvent(compile_id="0/1", frame="forward", location=None, step=6, seconds=1.0)]
    assert watch.settling(5, planned_warmup=5) is False  # steps 2-4 compiled nothing: settled
    assert watch.settling(7, planned_warmup=5) and watch.settling(9, planned_warmup=5)  # step 6 compiled
    assert watch.settling(10, planned_warmup=5) is False  # steps 7-9 quiet
    watch._events.append(CompileEvent(compile_id="0/2", frame="forward", location=None,
                                      step=5 + COMPILE_SETTLE_STEPS, seconds=1.0))
    assert watch.settling(6 + COMPILE_SETTLE_STEPS, planned_warmup=5) is False  # past the bound: timed anyway


def test_each_graph_break_site_is_a_finding_of_its_own_with_its_line_and_share():
    from diagnose.model import Analysis, BreakSite, CompiledSteps

    sites = (BreakSite(location="/src/model.py:40", function="forward", reason="Unsupported Tensor.item() call",
                       per_step=1.0, eager_s_per_step=3e-4, cost_frac=0.06),
             BreakSite(location="/src/model.py:52", function="forward", reason="Failed to trace builtin operator",
                       per_step=1.0, eager_s_per_step=1e-4, cost_frac=0.02))
    metrics = dict.fromkeys(rule_engine.METRICS) | {"compile_graph_breaks": 2.0, "compile_graphs_per_step": 3.0,
                                                     "compile_break_frac": 0.08, "compile_eager_frac": 0.12}
    analysis = Analysis(steps=(), step_time_s={"mean": 0.01, "p50": 0.01, "p95": 0.01}, breakdown={}, top_ops=(),
                        host_lines=(), metrics=metrics, locations={"graph_break": "/src/model.py:40"},
                        step_definition="test",
                        compiled=CompiledSteps(graphs_per_step=3.0, eager_frac=0.12, breaks=sites))
    rules = [r for r in rule_engine.load_rules(optimization_ids=REGISTRY) if r.id == "compile.graph-break"]
    first, second = rule_engine.evaluate(rules, analysis)
    assert (first.location, second.location) == ("/src/model.py:40", "/src/model.py:52")
    assert (first.cost_fraction, second.cost_fraction) == (0.06, 0.02)
    assert "Tensor.item()" in first.message and "builtin operator" in second.message
    assert "torch.where" in first.fix_code and "torch.where" not in second.fix_code


def test_a_step_that_compiled_is_left_out_of_the_plain_timing():
    import time

    from diagnose.capture.plain_timer import PlainTimer

    compiled = iter([False, False, True, False, False])
    timer = PlainTimer(4, None, rewarm_steps=0, step_compiled=lambda: next(compiled))
    timing = None
    for pause in (0.001, 0.001, 0.2, 0.001, 0.001):  # the third step recompiles: 200 ms
        time.sleep(pause)
        timing = timer.boundary() or timing
    assert timing.steps == 4 and timing.seconds < 0.1  # four steady steps, the compiling one left out
    assert len(timing.step_ends_s) == 4 and timing.step_ends_s[-1] == timing.seconds


def test_a_recompile_after_the_first_step_moves_the_max_seconds_deadline_by_its_own_time():
    import time
    from types import SimpleNamespace

    from diagnose.capture.host import ScriptHost
    from diagnose.model import CompileEvent

    watch = DynamoWatch()
    armed = []
    host = ScriptHost.__new__(ScriptHost)  # the deadline's arithmetic alone: no script, no signals
    host.config = SimpleNamespace(max_seconds=60.0, startup_seconds=600.0)
    host.instr = SimpleNamespace(dynamo=watch)
    host.first_step_at, host.t0, host.stop_reason = time.monotonic() - 40.0, time.monotonic() - 50.0, None
    host.on_boundary, host._start_timer = (lambda count: None), armed.append
    watch._events = [CompileEvent(compile_id="0/1", frame="forward", location=None, step=3, seconds=30.0)]
    host.boundary(5)  # 40 s since the first step, 30 of them recompiling: 10 s of the 60 used
    assert armed[-1] == pytest.approx(50.0, abs=0.5)


def test_torchs_default_cache_set_by_an_earlier_compile_is_not_taken_for_the_users_own(monkeypatch, tmp_path):
    """torch writes its default inductor folder into the process's environment the first time it compiles there (a
    notebook, a caller of the Python API, a test process): a run started after that still compiles in a cache of its
    own, empty, and the variable is as it was afterwards. A folder the user chose is kept."""
    import os

    from torch._inductor.runtime.cache_dir_utils import cache_dir

    from diagnose.capture.compile_cache import CACHE_VARIABLE, MARKER, private_compile_cache, torch_default_cache

    monkeypatch.delenv(CACHE_VARIABLE, raising=False)
    monkeypatch.delenv(MARKER, raising=False)
    torchs = cache_dir()  # what torch's first compile in a process does
    assert os.environ[CACHE_VARIABLE] == torchs == torch_default_cache()
    with private_compile_cache():
        private = os.environ[CACHE_VARIABLE]
        assert private != torchs and os.environ[MARKER] == "1" and os.listdir(private) == []
    assert os.environ[CACHE_VARIABLE] == torchs and MARKER not in os.environ and not os.path.exists(private)
    mine = str(tmp_path / "mine")
    monkeypatch.setenv(CACHE_VARIABLE, mine)
    with private_compile_cache():
        assert os.environ[CACHE_VARIABLE] == mine and MARKER not in os.environ
