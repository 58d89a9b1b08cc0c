"""GPU-bound steps measured on the device timeline, the tensor-core loss priced by the device, and launches by
phase. Real traces recorded on an H200 for this project (tests/data/traces/h200, truth.json holds each model's
unprofiled, synchronised step time) and a generated trace in which the host runs a launch queue ahead."""
from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest
from conftest import REPO, TRACES, diagnose_cli

from diagnose.analysis.analyze import Inputs, analyze
from diagnose.analysis.breakdown import host_steps
from diagnose.analysis.sources import analyze_traces
from diagnose.commands.pipeline import diagnose_analysis
from diagnose.formatting import fmt_ms
from diagnose.trace.load import load_trace

H200 = TRACES / "h200"
TRUTH = json.loads((H200 / "truth.json").read_text())


def _diagnose(name: str):
    analysis = analyze_traces([H200 / f"{name}.pt.trace.json.gz"])
    return analysis, diagnose_analysis(analysis, ())


@pytest.mark.parametrize("name", ["convnet_fp32", "transformer_fp32"])
def test_fp32_model_on_h200_steps_take_the_gpus_time_and_tensor_cores_lead(name):
    analysis, findings = _diagnose(name)
    truth = TRUTH[name]["fp32"]
    assert analysis.step_time_s["mean"] == pytest.approx(truth, rel=0.15)
    assert analysis.breakdown["compute"] > 0.9  # the host ran ahead of a busy GPU: that is not host overhead
    top = findings[0]
    assert top.rule == "utilization.tensor-cores-unused"
    assert top.cost_fraction >= 0.6  # Hopper's bf16 rate is ~15x its fp32 rate: most of the GEMM time is lost
    assert top.optimizations[0] == "amp" and "tf32" in top.optimizations
    assert "15x faster in bf16" in top.message and "9.0" in top.message


def test_tensor_core_cost_is_within_reach_of_what_bf16_measured():
    """truth.json: bf16 autocast removed 82% (convnet) and 84% (transformer) of the step; the priced loss must
    say 'most of the step', not the half that a device-blind estimate gave."""
    for name in ("convnet_fp32", "transformer_fp32"):
        analysis, findings = _diagnose(name)
        measured = 1 - TRUTH[name]["bf16_autocast"] / TRUTH[name]["fp32"]
        assert analysis.metrics["tensor_core_loss_frac"] == pytest.approx(measured, abs=0.1)


def test_bf16_transformer_is_healthy_and_timed_from_the_device():
    analysis, findings = _diagnose("transformer_bf16")
    assert analysis.step_time_s["mean"] == pytest.approx(TRUTH["transformer_fp32"]["bf16_autocast"], rel=0.25)
    assert not [f for f in findings if f.severity == "high"]


def test_per_parameter_optimizer_is_named_as_the_source_of_most_launches():
    analysis, findings = _diagnose("narrow_mlp_foreach_off")
    phases = {p.phase: p for p in analysis.phases}
    launches = sum(p.launches_per_step for p in phases.values())
    assert phases["optimizer"].launches_per_step / launches > 0.6
    assert phases["forward"].launches_per_step > 0 and phases["backward"].launches_per_step > 0
    finding = next(f for f in findings if f.rule == "utilization.per-parameter-optimizer")
    assert finding.optimizations == ("optimizer.fused",)
    assert "optimizer.step()" in finding.message and finding.severity == "high"
    assert "fused=True" in finding.fix_code


def test_phases_of_a_gpu_bound_convnet_put_the_gpu_time_in_forward_and_backward():
    analysis, _ = _diagnose("convnet_fp32")
    phases = {p.phase: p for p in analysis.phases}
    busy = sum(p.gpu_busy_s_per_step for p in phases.values())
    assert phases["forward"].gpu_busy_s_per_step + phases["backward"].gpu_busy_s_per_step > 0.95 * busy
    assert busy == pytest.approx(analysis.step_time_s["mean"], rel=0.05)


@pytest.fixture(scope="module")
def gpu_bound_trace(tmp_path_factory):
    path = tmp_path_factory.mktemp("gpubound") / "gpu_bound.json.gz"
    done = subprocess.run([sys.executable, str(REPO / "benchmarks" / "make_trace.py"), str(path), "--events", "20000",
                           "--steps", "7", "--seed", "3", "--world-size", "1", "--gpu-bound"],
                          capture_output=True, text=True, timeout=120, check=True)
    return path, json.loads(done.stdout)


@pytest.mark.full  # starts processes (a whole run, the CLI, a script): the full tier
def test_host_running_a_queue_ahead_is_timed_at_the_gpus_pace(gpu_bound_trace):
    path, counts = gpu_bound_trace
    trace = load_trace(path)
    host = host_steps(trace)
    host_mean_us = float((host[:, 1] - host[:, 0]).mean())
    gpu_us = counts["gpu_us_per_step"]
    assert host_mean_us < 0.8 * gpu_us  # the host's own spans are misleading here: the test means something
    analysis = analyze(Inputs(trace))
    assert analysis.step_time_s["mean"] * 1e6 == pytest.approx(gpu_us, rel=0.05)
    assert analysis.breakdown["compute"] > 0.95 and analysis.breakdown["host_overhead"] < 0.03


def test_traces_without_gpu_lag_keep_their_host_step_times():
    """A host-bound trace whose GPU keeps up: the device timeline changes nothing that matters."""
    trace = load_trace(TRACES / "a100_ddp_rank3_of8.json.gz")
    host = host_steps(trace)
    analysis = analyze(Inputs(trace))
    assert analysis.step_time_s["mean"] * 1e6 == pytest.approx(float((host[:, 1] - host[:, 0]).mean()), rel=0.02)


def test_analyze_cli_writes_device_timeline_steps_and_phases(tmp_path):
    out = tmp_path / "out"
    proc = diagnose_cli("analyze", str(H200 / "convnet_fp32.pt.trace.json.gz"), "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    diagnosis = json.loads((out / "diagnosis.json").read_text())
    assert diagnosis["step_time_s"]["mean"] == pytest.approx(TRUTH["convnet_fp32"]["fp32"], rel=0.15)
    assert {p["phase"] for p in diagnosis["phases"]} == {"data", "forward", "backward", "optimizer", "other"}
    assert diagnosis["findings"][0]["rule"] == "utilization.tensor-cores-unused"
    html = (out / "report.html").read_text()
    assert "Launches and GPU time by phase" in html
    # the step time a user reads in the terminal: the GPU's, as diagnosis.json gives it
    shown = f"step {fmt_ms(diagnosis['step_time_s']['mean'])}"
    assert re.search(rf"(?<![\d.]){re.escape(shown)}", proc.stdout + proc.stderr), (shown, proc.stderr[-2000:])


def test_a_step_whose_device_work_is_missing_neither_overlaps_nor_doubles_the_others():
    """A step that launched nothing the trace links (events the profiler dropped) while the GPU lags: the steps
    stay in order and disjoint, and the GPU's total time is not counted twice."""
    trace = load_trace(H200 / "convnet_fp32.pt.trace.json.gz")
    host = host_steps(trace)
    corr = trace.runtime.correlations()
    in_step_2 = (trace.runtime.start >= host[2, 0]) & (trace.runtime.start < host[2, 1])
    corr[in_step_2] = -1
    analysis = analyze(Inputs(trace))
    starts = [s.start_s for s in analysis.steps]
    ends = [s.start_s + s.duration_s for s in analysis.steps]
    assert starts == sorted(starts) and all(e <= s + 1e-9 for e, s in zip(ends, starts[1:]))
    total = ends[-1] - starts[0]
    assert total == pytest.approx(5 * TRUTH["convnet_fp32"]["fp32"], rel=0.15)


def test_an_amd_gpu_is_not_priced_as_an_nvidia_one():
    analysis = analyze(Inputs(load_trace(TRACES / "rocm_mi250_toy.json.gz")))
    assert analysis.metrics["tensor_core_speedup"] == 2.0 and analysis.metrics["tf32_speedup"] is None


def test_no_host_ran_ahead_note_when_the_host_kept_pace():
    for name in ("v100_ddp_rank1_of2.json.gz", "h200/transformer_fp32.pt.trace.json.gz"):
        notes = analyze(Inputs(load_trace(TRACES / name))).notes
        assert not any("enqueued each step" in n for n in notes), name
    notes = analyze(Inputs(load_trace(H200 / "convnet_fp32.pt.trace.json.gz"))).notes
    assert any("enqueued each step" in n for n in notes)
