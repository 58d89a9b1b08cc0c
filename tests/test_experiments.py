"""Experiments on the unchanged sample scripts: verified speedups, honest no-changes, skipped with reasons."""
from __future__ import annotations

import json

import pytest

from conftest import SAMPLES, run_script
from diagnose.capture.runner import run_capture
from diagnose.model import Change, MeasurePlan, Measurement, RunConfig
from diagnose.serial import read_json


def _experiment_run(tmp_path, script: str, *options: str, script_args: tuple[str, ...] = ()):
    run = run_script(SAMPLES / script, *script_args, out=tmp_path / "run",
                     options=("--warmup", "3", "--steps", "8", *options))
    assert run.returncode == 0, run.stderr
    return run


def _by(experiments: list[dict], optimization: str) -> list[dict]:
    return [e for e in experiments if e["optimization"] == optimization]


def _independent_throughput(tmp_path, name: str, changes: tuple[Change, ...], steps: int = 200) -> float:
    """Steps/s of the sample over one long window of `steps` steps, after a generous warm-up."""
    folder = tmp_path / name
    folder.mkdir()
    plan = MeasurePlan(changes=changes, warmup_steps=30, warmup_s=1.0, window_s=0.0, min_window_steps=steps, windows=1)
    config = RunConfig(script=str(SAMPLES / "slow_loader.py"), script_args=("--num-items", "9600"), out_dir=str(folder),
                       warmup_steps=0, profile_steps=0, max_seconds=120, measure=plan)
    run_capture(config, folder, lambda line, err: None, lambda line: None)
    [window] = read_json(folder / "measure.json", Measurement).windows
    return window.wall_steps / window.wall_seconds  # plain wall time: epoch starts and all


def test_slow_loader_default_run_verifies_more_workers_and_the_claim_holds_on_a_longer_run(tmp_path):
    # 600 steps an epoch: long enough for 16 workers to reach their steady state within the script (with 120,
    # worker restarts every epoch dominate and the claim comes out conservative, about 0.7x of a long run's)
    run = _experiment_run(tmp_path, "slow_loader.py", script_args=("--num-items", "9600"))
    assert run.seconds < 300
    d = run.diagnosis
    workers = [e for e in _by(d["experiments"], "dataloader.num_workers") if e["verdict"] == "faster"]
    best = max(workers, key=lambda e: e["speedup"])
    assert best["speedup"] >= 3 and best["ci"][0] > 1
    assert best["metric"] == "steps/s" and best["loss_drift"] == 0.0  # same seeds, same data order
    assert "+" in best["change"] and "num_workers=" in best["change"]  # a unified diff of the script
    [combined] = _by(d["experiments"], "combined")
    assert combined["verdict"] == "faster" and d["headline"]["verdict"] == "faster"
    assert "Verified:" in run.stderr
    baseline = _independent_throughput(tmp_path, "base", ())
    chosen = _independent_throughput(tmp_path, "chosen", (Change("dataloader.num_workers", best["setting"]),))
    assert abs(best["speedup"] / (chosen / baseline) - 1) <= 0.2, (best["speedup"], chosen / baseline)


def test_cpu_bound_preprocessing_is_fixed_by_caching_not_by_workers(tmp_path):
    run = _experiment_run(tmp_path, "cpu_preprocessing.py", "--experiments", "dataset.cache,dataloader.num_workers")
    experiments = run.diagnosis["experiments"]
    [cache] = _by(experiments, "dataset.cache")
    assert cache["verdict"] == "faster" and cache["speedup"] >= 5, cache
    cores = run.diagnosis["metrics"]["cpu_count"]
    for workers in _by(experiments, "dataloader.num_workers"):
        # CPU-bound items: workers can at most use the idle cores (the sample trains on one thread)
        assert workers["verdict"] != "faster" or workers["speedup"] <= cores * 1.15, workers
    assert cache["speedup"] > max(w["speedup"] or 0 for w in _by(experiments, "dataloader.num_workers"))


def test_tiny_batch_gains_samples_per_second_from_a_larger_batch(tmp_path):
    run = _experiment_run(tmp_path, "tiny_batch.py", "--experiments", "batch_size")
    batch = [e for e in _by(run.diagnosis["experiments"], "batch_size") if e["verdict"] == "faster"]
    assert batch and max(e["speedup"] for e in batch) >= 3
    assert all(e["metric"] == "samples/s" and e["fidelity"] == "changes-dynamics" for e in batch)


def test_pin_memory_on_a_cpu_run_is_skipped_with_its_reason(tmp_path):
    run = _experiment_run(tmp_path, "slow_loader.py", "--experiments", "dataloader.pin_memory,ddp")
    experiments = {e["optimization"]: e for e in run.diagnosis["experiments"]}
    assert experiments["dataloader.pin_memory"]["verdict"] == "skipped"
    assert "no CUDA device" in experiments["dataloader.pin_memory"]["reason"]
    assert experiments["ddp"]["verdict"] == "skipped" and "recommendation only" in experiments["ddp"]["reason"]
    assert not (run.run_dir / "experiments").exists()  # nothing was run for them


@pytest.mark.parametrize("bad", ["turbo", "dataloader.num_workers,nope"])
def test_unknown_optimization_ids_are_refused(tmp_path, bad):
    run = run_script(SAMPLES / "slow_loader.py", out=tmp_path / "run", options=("--experiments", bad))
    assert run.returncode == 2 and "unknown optimization id" in run.stderr
    assert not json.dumps(run.stdout).count("Traceback")
