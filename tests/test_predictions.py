"""Findings that predict: a finding's cost is a share of the step its own evidence measures, no more than the speed
of light leaves; its prediction is the speedup removing that share gives, held against what its experiment
measured; and compare's run-to-run spread is measured by the blocks of each run's timed window."""
from __future__ import annotations

import json
import math

import pytest
from conftest import SCRIPTS, diagnose_cli, run_script

from diagnose import rules as rule_engine
from diagnose.compare.interval import RUN_NOISE_DEFAULT_SD, RUN_NOISE_FLOOR_SD, gate, step_change
from diagnose.compare.sides import block_noise
from diagnose.model import Analysis, CompareSide, Experiment, Finding, PlainTiming
from diagnose.optimizations import REGISTRY
from diagnose.verdict.predictions import check_predictions

BUNDLED = {r.id: r for r in rule_engine.load_rules(optimization_ids=REGISTRY)}


def _findings(metrics: dict) -> dict[str, Finding]:
    values = {name: None for name in rule_engine.METRICS} | {"step_time_mean_s": 0.0234} | metrics
    analysis = Analysis(steps=(), step_time_s={"mean": 0.0234, "p50": 0.0234, "p95": 0.0234}, breakdown={},
                        top_ops=(), host_lines=(), metrics=values, locations={"loader": "train.py:9"},
                        step_definition="test")
    return {f.rule: f for f in rule_engine.evaluate(list(BUNDLED.values()), analysis)}


# The held-out MLP of issue 38 (512-1024-1024-10, AdamW, batch 256) as its run measured it on a quiet machine:
# 597 ops a step at a mean of 33 us, 49% of the float32 peak; a plain run at 16x the batch gave 1.42x.
COMPUTE_BOUND_MLP = {"has_gpu": 0, "op_mean_us": 33, "ops_per_step": 597, "compute_frac": 0.83,
                     "host_framework_frac": 0.07, "data_wait_frac": 0.10, "peak_memory_frac": 0.02, "mfu": 0.49,
                     "mfu_best_dtype": 0.49, "loader_batch_size": 256, "optimizer_frac": 0.27, "op_fixed_us": 2.8,
                     "op_overhead_frac": 0.01, "fixed_step_frac": 0.30, "loader_num_workers": 0,
                     "micro_batches_per_step": 1}


def test_a_compute_bound_step_is_not_called_90_percent_overhead():
    found = _findings(COMPUTE_BOUND_MLP)
    dispatch = found["utilization.dispatch-bound"]
    # its cost is torch's share that does not grow with the batch (the optimizer's update, the ops' fixed cost),
    # not all of compute; and the step runs at 49% of its peak, as well-tuned training does: medium, not high
    assert dispatch.cost_fraction == pytest.approx(0.28) and dispatch.severity == "medium"
    assert dispatch.predicted_speedup == pytest.approx(1 / 0.72)
    assert "well-tuned" in dispatch.cost_basis
    assert "16x at most 1.39x" in dispatch.message and "optimizer's update takes 27%" in dispatch.message
    assert "30% of the step is fixed per step" in dispatch.message
    assert not [f for f in found.values() if f.severity == "high"]


def test_no_finding_claims_more_of_the_step_than_the_speed_of_light_leaves():
    # a loop whose host overhead a rule blames for 70% of the step, while the step reaches 60% of its peak
    found = _findings({"has_gpu": 0, "host_overhead_frac": 0.7, "host_user_frac": 0.7, "host_top_line_frac": 0.7,
                       "compute_frac": 0.3, "mfu": 0.6, "mfu_best_dtype": 0.6})
    blamed = [f for f in found.values() if f.category == "host-overhead"]
    assert blamed
    for finding in blamed:
        assert finding.cost_fraction == pytest.approx(0.4) and finding.predicted_speedup == pytest.approx(1 / 0.6)
        assert "already reaches 60% of its dtype's peak" in finding.cost_basis


def test_memory_risks_predict_no_speedup():
    found = _findings({"has_gpu": 1, "peak_memory_frac": 0.95, "memory_peak_limit_frac": 0.95,
                       "memory_capacity_bytes": 80e9, "peak_memory_bytes": 76e9})
    near = found["memory.near-capacity"]
    assert near.predicted_speedup is None and near.cost_fraction > 0


def _finding(rule: str, cost: float, optimizations: tuple[str, ...]) -> Finding:
    return Finding(rule=rule, category="utilization", severity="high", cost_fraction=cost, title="", message="",
                   location=None, fix="", fix_code="", optimizations=optimizations,
                   predicted_speedup=rule_engine.speedup_bound(cost))


def _experiment(optimization: str, setting: dict, speedup: float) -> Experiment:
    return Experiment(optimization=optimization, setting=setting, metric="samples/s", speedup=speedup,
                      ci=(speedup * 0.95, speedup * 1.05), verdict="faster", loss_drift=None, peak_memory_bytes=None,
                      reason="")


# (cost, experiment's change, measured speedup) -> verdict: a batch k times larger spreads the cost over k times
# the samples (1 / (c / k + 1 - c)); any other fix removes it (1 / (1 - c))
PREDICTION_CASES = [
    (0.30, ("batch_size", {"batch_size": 4096}), 1.42, "agrees", 1 / (0.3 / 16 + 0.7)),
    (0.90, ("batch_size", {"batch_size": 4096}), 1.42, "over-predicted", 1 / (0.9 / 16 + 0.1)),
    (0.93, ("batch_size", {"batch_size": 4096}), 12.6, "agrees", 1 / (0.93 / 16 + 0.07)),
    (0.10, ("compile", {}), 3.0, "under-predicted", 1 / 0.9),
    (0.50, ("compile", {}), 1.8, "agrees", 2.0),
]


@pytest.mark.parametrize("cost, change, measured, verdict, predicted", PREDICTION_CASES)
def test_a_prediction_is_held_against_its_best_experiment(cost, change, measured, verdict, predicted):
    finding = _finding("utilization.dispatch-bound", cost, ("batch_size", "compile"))
    weaker = _experiment(change[0], change[1], 1.01)
    [check] = check_predictions((finding,), (weaker, _experiment(change[0], change[1], measured)),
                                {"loader_batch_size": 256})
    assert check.verdict == verdict and check.predicted_speedup == pytest.approx(predicted)
    assert check.measured_speedup == measured and check.ratio == pytest.approx(predicted / measured)


# slow_loader.py: 98% of the step waits for items that sleep (CPU share 0.1); 16 workers measured 11.7x on 2 cores
# where removing the wait would give 50x: the workers share it, sixteen ways for items that wait, two for items
# that compute on two cores
@pytest.mark.parametrize("item_cpu, predicted", [(0.1, 1 / (0.02 + 0.98 / 16)), (0.9, 1 / (0.02 + 0.98 / 2))])
def test_more_workers_are_predicted_to_share_the_wait(item_cpu, predicted):
    finding = _finding("data-loading.slow-loader", 0.98, ("dataloader.num_workers",))
    metrics = {"loader_num_workers": 0, "dataset_item_cpu_frac": item_cpu, "cpu_count": 2}
    [check] = check_predictions((finding,), (_experiment("dataloader.num_workers", {"num_workers": 16}, 11.7),),
                                metrics)
    assert check.predicted_speedup == pytest.approx(predicted)
    assert check.verdict == ("agrees" if item_cpu < 0.5 else "under-predicted")
    assert "wait shared by" in check.basis


def test_a_finding_whose_fixes_did_not_run_is_unmeasured():
    finding = _finding("utilization.dispatch-bound", 0.3, ("batch_size",))
    [check] = check_predictions((finding,), (_experiment("compile", {}, 2.0),), {"loader_batch_size": 256})
    assert check.verdict == "unmeasured" and check.measured_speedup is None


def _window(step_s: list[float], burst: int = 1) -> PlainTiming:
    ends = [sum(step_s[:i + 1]) for i in range(len(step_s))]
    return PlainTiming(len(step_s), ends[-1], False, tuple(ends), burst)


def test_the_blocks_of_a_timed_window_measure_its_spread():
    steady = _window([0.020] * 20)
    assert block_noise(steady) == (pytest.approx(0.0, abs=1e-12), 4)
    drifting = _window([0.020] * 5 + [0.022] * 5 + [0.024] * 5 + [0.026] * 5)
    sd, blocks = block_noise(drifting)
    logs = [math.log(x) for x in (0.020, 0.022, 0.024, 0.026)]
    mean = sum(logs) / 4
    assert blocks == 4 and sd == pytest.approx(math.sqrt(sum((x - mean) ** 2 for x in logs) / 3))
    assert block_noise(_window([0.02] * 2)) is None  # too few steps for three blocks
    assert block_noise(_window([0.02] * 8, burst=4)) is None  # two bursts of four: two blocks at most


def _side(step_s: float, block_sd=None, blocks: int = 0) -> CompareSide:
    return CompareSide(path="x", kind="run", script="train.py", step_s=step_s, step_basis="unprofiled", steps=20,
                       step_cv=0.05, profiled_step_s=step_s, block_noise_sd=block_sd, blocks=blocks)


def test_each_runs_spread_is_what_it_measured_or_stated_else_the_documented_default():
    assumed = step_change(_side(0.020), _side(0.020))
    assert assumed.run_noise_source == "assumed" and assumed.run_noise_sd == RUN_NOISE_DEFAULT_SD
    blocks = step_change(_side(0.020, 0.08, 4), _side(0.020, 0.04, 4))
    assert blocks.run_noise_source == "blocks"
    assert blocks.run_noise_sd == pytest.approx(math.sqrt((0.08 ** 2 + 0.04 ** 2) / 2))
    # a stated spread counts for each run unless that run measured more
    stated = step_change(_side(0.020, 0.08, 4), _side(0.020, 0.001, 4), stated_noise_sd=0.01)
    assert stated.run_noise_sd == pytest.approx(math.sqrt((0.08 ** 2 + 0.01 ** 2) / 2))
    quiet = step_change(_side(0.020, 0.001, 4), _side(0.020, 0.002, 4))
    assert quiet.run_noise_source == "floor" and quiet.run_noise_sd == pytest.approx(RUN_NOISE_FLOOR_SD)
    # an old run folder (no blocks) against a new one: the old run's spread is the default, not the new run's
    mixed = step_change(_side(0.020), _side(0.020, 0.04, 4))
    assert mixed.run_noise_sd == pytest.approx(math.sqrt((RUN_NOISE_DEFAULT_SD ** 2 + 0.04 ** 2) / 2))
    # what a gate at 5% needs: a run twice as slow as allowed must fail it
    step = step_change(_side(0.020, 0.08, 4), _side(0.022, 0.08, 4))
    result = gate(step, 5)
    assert step.t > 2.58 and result.needs_run_noise_sd == pytest.approx(math.log(1.05) / (step.t * math.sqrt(2)))
    assert result.run_noise_sd == pytest.approx(0.08) and not result.failed


@pytest.mark.full  # starts processes (a whole run, the CLI, a script): the full tier
def test_a_run_carries_the_blocks_of_its_timed_window_into_compare(tmp_path):
    a = run_script(SCRIPTS / "small_loop.py", out=tmp_path / "a", options=("--warmup", "2", "--steps", "12",
                                                                            "--experiments", "none"))
    assert a.returncode == 0, a.stderr
    window = json.loads((a.run_dir / "capture.json").read_text())["unprofiled_window"]
    assert window["steps"] == 12 and len(window["step_ends_s"]) == 12
    proc = diagnose_cli("compare", str(a.run_dir), str(a.run_dir), "--json", "--out", str(tmp_path / "cmp"))
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert result["a"]["blocks"] == 4 and result["a"]["block_noise_sd"] is not None
    assert result["step"]["run_noise_source"] == "blocks" and result["step"]["verdict"] == "no-change"
    assert "between blocks of the runs' timed windows" in proc.stderr
