"""The live GPU paths (NVML, torch.cuda memory stats): without a GPU they must say "unavailable", and what a
GPU run would record must become metrics and findings. Only the GPU itself is faked here (the machines that
run the suite have none; on one that has, the tests hold too and one more reads the real device);
`sample_runs/cuda_train.py` exercises the real paths on a GPU."""
from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from diagnose import rules as rule_engine
from diagnose.analysis.analyze import Inputs, analyze
from diagnose.capture import device
from diagnose.model import Capture
from diagnose.optimizations import REGISTRY
from diagnose.serial import read_json
from diagnose.trace.load import load_trace


def test_live_gpu_readings_degrade_to_unavailable_without_a_gpu(monkeypatch):
    # no GPU as torch sees it, on either kind of machine (on a GPU machine this hides the real one)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert device.device_facts() == {}
    assert device.peak_memory() == (None, None)
    assert device.allocator_stats() == {}
    nvml = device.Nvml()
    assert nvml.status.startswith("unavailable") and nvml.sample() == {} and nvml.facts() == {}


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_live_gpu_readings_name_the_device_on_a_gpu():
    torch.zeros(1, device="cuda")  # the script has used CUDA: torch's view of the device is read
    facts = device.device_facts()
    assert facts["gpu_name"] and facts["gpu_memory_bytes"] > 0
    reserved, capacity = device.peak_memory()
    assert capacity > 0 and 0 < reserved <= capacity


def test_allocator_counters_are_read_from_memory_stats(monkeypatch):
    # fake CUDA (none here): the names torch.cuda.memory_stats() uses on a real device
    stats = {"num_alloc_retries": 7, "num_ooms": 0, "allocated_bytes.all.peak": 30 << 30,
             "reserved_bytes.all.peak": 60 << 30, "active.all.current": 12}
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    monkeypatch.setattr(torch.cuda, "memory_stats", lambda *a, **k: stats)
    assert device.allocator_stats() == {"alloc_retries": 7, "ooms": 0, "peak_allocated_bytes": 30 << 30,
                                     "peak_reserved_bytes": 60 << 30}


@pytest.mark.full  # starts processes (a whole run, the CLI, a script): the full tier
def test_allocator_retries_and_fragmentation_of_a_gpu_run_become_memory_findings(sample_run):
    run = sample_run("healthy.py")
    capture = read_json(run.run_dir / "capture.json", Capture)
    assert capture.allocator == {} and capture.memory_kind == "host"  # what this CPU run recorded
    # what the same capture holds on an 80 GiB GPU whose allocator retried (fields a GPU run fills in)
    on_gpu = replace(capture, memory_kind="cuda", peak_memory_bytes=75 << 30, memory_capacity_bytes=80 << 30,
                     allocator={"alloc_retries": 9, "ooms": 0, "peak_allocated_bytes": 40 << 30,
                                "peak_reserved_bytes": 75 << 30})
    [trace] = sorted((run.run_dir / "tb").glob("*.pt.trace.json*"))
    analysis = analyze(Inputs(load_trace(trace), on_gpu))
    m = analysis.metrics
    assert m["has_gpu"] == 1 and m["allocator_retries"] == 9
    assert abs(m["fragmentation_frac"] - (1 - 40 / 75)) < 1e-9
    fired = {f.rule: f for f in rule_engine.evaluate(rule_engine.load_rules(optimization_ids=REGISTRY), analysis)}
    assert "retried 9 allocation(s)" in fired["memory.allocator-retries"].message
    assert "expandable_segments" in fired["memory.allocator-retries"].optimizations
    assert "47% of the reserved memory was cached but unused" in fired["memory.fragmentation"].message
    assert "memory.near-capacity" in fired  # 94% of the device


def test_a_cpu_run_has_no_allocator_metrics(recorded_run):
    m = recorded_run("healthy").diagnosis["metrics"]
    assert m["allocator_retries"] is None and m["fragmentation_frac"] is None and m["has_gpu"] == 0


@pytest.mark.full  # starts processes (a whole run, the CLI, a script): the full tier
def test_the_cuda_sample_runs_on_the_cpu_when_asked(tmp_path):
    # the script that exercises the live GPU paths must itself work, even where no GPU can check it
    from conftest import SAMPLES, run_script

    run = run_script(SAMPLES / "cuda_train.py", "--device", "cpu", "--batch-size", "4", "--num-items", "96",
                     out=tmp_path / "run", options=("--warmup", "2", "--steps", "3", "--experiments", "none"))
    assert run.returncode == 0, run.stderr
    assert run.diagnosis["steps_profiled"] >= 3 and run.diagnosis["metrics"]["has_gpu"] == 0
