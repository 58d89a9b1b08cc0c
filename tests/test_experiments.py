"""Experiments on the unchanged sample scripts: verified speedups, honest no-changes, skipped with reasons.

The tests that time experiments (minutes each on 2 cores) are marked slow: `pytest -m slow` runs them."""
from __future__ import annotations

import sys

import pytest
from conftest import SAMPLES, logged_step_times, run_script


def _experiment_run(tmp_path, script: str, *options: str, script_args: tuple[str, ...] = ()):
    run = run_script(SAMPLES / script, *script_args, out=tmp_path / "run",
                     options=("--warmup", "3", "--steps", "8", *options))
    assert run.returncode == 0, run.stderr
    return run


def _by(experiments: list[dict], optimization: str) -> list[dict]:
    return [e for e in experiments if e["optimization"] == optimization]


def _plain_script_steps_per_s(num_workers: int, *extra: str, first: int = 60, epochs: int = 4) -> float:
    """Steps/s of the unchanged sample, run by plain Python with `--num-workers`, timed from its own log lines
    over two whole 120-step epochs (step `first` to `first` + 240): wall time, worker restarts included."""
    last = first + 240
    command = [sys.executable, "-u", str(SAMPLES / "slow_loader.py"), "--num-workers", str(num_workers),
               "--epochs", str(epochs), "--log-every", "20", *extra]
    seen = logged_step_times(command)
    return (last - first) / (seen[last] - seen[first])


@pytest.mark.slow
def test_slow_loader_on_a_60_s_budget_verifies_more_workers_and_the_claim_holds_on_a_longer_run(tmp_path):
    run = _experiment_run(tmp_path, "slow_loader.py", "--budget-seconds", "60")
    assert run.seconds < 120
    d = run.diagnosis
    assert "Experiment budget 60 s" in run.stderr and "dataloader.num_workers" in d["budget"]["decided"]
    workers = [e for e in _by(d["experiments"], "dataloader.num_workers") if e["verdict"] == "faster"]
    best = max(workers, key=lambda e: e["speedup"])
    assert best["speedup"] >= 3 and best["ci"][0] > 1
    assert best["metric"] == "steps/s" and best["loss_drift"] == 0.0  # same seeds, same data order
    # a shuffled map-style loader under workers feeds the baseline's samples in the baseline's order: identical
    assert best["data_check"] == "same-sequence" and best["fidelity"] == "identical", best
    assert "+" in best["change"] and "num_workers=" in best["change"]  # a unified diff of the script
    assert best["change"].startswith("--- a/sample_runs/slow_loader.py\n+++ b/sample_runs/slow_loader.py")  # git apply
    [combined] = _by(d["experiments"], "combined")
    # an independent check: the script alone, twice as long, with the chosen setting passed as its own option;
    # each side twice, interleaved, the best of each (a busy machine only slows a run down)
    workers_n = best["setting"]["num_workers"]
    sides = {"plain": (0,), "workers": (workers_n,), "both": (workers_n, "--persistent-workers")}
    runs = {name: [] for name in sides}
    for _ in range(2):
        for name, args in sides.items():
            runs[name].append(_plain_script_steps_per_s(*args))
    plain = max(runs["plain"])
    measured = max(runs["workers"]) / plain
    assert abs(best["speedup"] / measured - 1) <= 0.2, (best["speedup"], measured, runs)
    # the combination (persistent workers ride on the workers) is what is left of 60 s: on a slow machine it may
    # not fit, and then it is said, not claimed. When it ran, its claim must hold on a plain run: never above it
    # (an over-claim is the bug); with 16 workers on 2 cores its two or three short runs may read low.
    if combined["verdict"] == "skipped":
        assert "budget" in combined["reason"], combined
        return
    assert combined["verdict"] == "faster" and d["headline"]["verdict"] == "faster", combined
    assert "Verified:" in run.stderr
    assert combined["setting"]["changes"] == [
        best_label := f"dataloader.num_workers(num_workers={best['setting']['num_workers']})",
        "dataloader.persistent_workers(persistent_workers=True)"], best_label
    both = max(runs["both"]) / plain
    assert combined["speedup"] <= 1.2 * both and combined["ci"][0] > 1, (combined["speedup"], both, runs)


@pytest.mark.slow
def test_cpu_bound_preprocessing_is_fixed_by_caching_not_by_workers_within_60_s(tmp_path):
    run = _experiment_run(tmp_path, "cpu_preprocessing.py", "--budget-seconds", "60")
    experiments = run.diagnosis["experiments"]
    assert run.diagnosis["budget"]["planned"][0] == "dataset.cache"  # the finding with the larger cost first
    [cache] = _by(experiments, "dataset.cache")
    assert cache["verdict"] == "faster" and cache["speedup"] >= 5, cache
    cores = run.diagnosis["metrics"]["cpu_count"]
    for workers in _by(experiments, "dataloader.num_workers"):
        # CPU-bound items: workers can at most use the idle cores (the sample trains on one thread)
        assert workers["verdict"] != "faster" or workers["speedup"] <= cores * 1.15, workers
    assert cache["speedup"] > max(w["speedup"] or 0 for w in _by(experiments, "dataloader.num_workers"))


@pytest.mark.full  # starts processes (a whole run, the CLI, a script): the full tier
def test_a_budget_too_small_for_two_runs_is_said_before_any_run_and_claims_nothing(tmp_path):
    run = _experiment_run(tmp_path, "slow_loader.py", "--budget-seconds", "12")
    d = run.diagnosis
    assert "Nothing was run: give --budget-seconds" in run.stderr
    assert d["budget"]["too_small"] and d["budget"]["runs"] == 0 and d["headline"] is None
    assert not (run.run_dir / "experiments").exists()
    assert {e["verdict"] for e in d["experiments"]} == {"skipped"}
    assert "diagnose run --experiments dataloader.num_workers --budget-seconds" in d["budget"]["rest_command"]
    assert ("No experiment ran" in run.stderr
            and "verified" not in run.stderr.lower().replace("no change was verified", ""))


@pytest.mark.slow
def test_tiny_batch_gains_samples_per_second_from_a_larger_batch(tiny_batch_experiments):
    run = tiny_batch_experiments
    assert run.returncode == 0, run.stderr[-3000:]
    batch = [e for e in _by(run.diagnosis["experiments"], "batch_size") if e["verdict"] == "faster"]
    assert batch and max(e["speedup"] for e in batch) >= 3
    assert all(e["metric"] == "samples/s" and e["fidelity"] == "changes-dynamics" for e in batch)


@pytest.mark.full  # starts processes (a whole run, the CLI, a script): the full tier
def test_pin_memory_on_a_cpu_run_is_skipped_with_its_reason(tmp_path):
    run = _experiment_run(tmp_path, "slow_loader.py", "--experiments", "dataloader.pin_memory,ddp")
    experiments = {e["optimization"]: e for e in run.diagnosis["experiments"]}
    assert experiments["dataloader.pin_memory"]["verdict"] == "skipped"
    assert "no CUDA device" in experiments["dataloader.pin_memory"]["reason"]
    assert experiments["ddp"]["verdict"] == "skipped" and "recommendation only" in experiments["ddp"]["reason"]
    assert not (run.run_dir / "experiments").exists()  # nothing was run for them


@pytest.mark.parametrize("bad", ["turbo", "dataloader.num_workers,nope"])
@pytest.mark.full  # starts processes (a whole run, the CLI, a script): the full tier
def test_unknown_optimization_ids_are_refused(tmp_path, bad):
    run = run_script(SAMPLES / "slow_loader.py", out=tmp_path / "run", options=("--experiments", bad))
    assert run.returncode == 2 and "unknown optimization id" in run.stderr
    assert "Traceback" not in run.stdout + run.stderr  # a usage error, not a crash
