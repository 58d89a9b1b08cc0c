"""What experiments fed the model: fingerprints of every sample, compared between a variant and the baseline.

Timed runs here are the real child processes experiments use (one script, its data fed right or wrong by its
own options); the comparison is the one `diagnose run` applies to every setting it measures."""
from __future__ import annotations

import json
import re

import pytest
from conftest import SAMPLES, SCRIPTS, diagnose_cli

from diagnose.capture.runner import run_in_child
from diagnose.experiments.same_data import DIFFERENT, SAME_SAMPLES, SAME_SEQUENCE, UNCHECKED, check_variant
from diagnose.experiments.scheduler import TIMED_ENTRY
from diagnose.model import Measurement, MeasurePlan, RunConfig
from diagnose.record.run_record import RunRecord

FED = SCRIPTS / "fed_samples.py"


def timed_run(tmp_path, name: str, *script_args: str, workers: int = 0) -> Measurement:
    """One timed run of fed_samples.py, as an experiment runs it: no profiler, warm-up, windows of steps."""
    folder = tmp_path / name
    folder.mkdir()
    burst = max(1, workers)
    plan = MeasurePlan(warmup_steps=5 + 3 * workers, warmup_s=0.3, window_s=0.5, min_window_steps=max(5, 2 * burst),
                       rewarm_steps=burst, burst_steps=burst, windows=2)
    config = RunConfig(script=str(FED), script_args=script_args, out_dir=str(folder), warmup_steps=0,
                       profile_steps=0, max_seconds=60, measure=plan)
    run_in_child(config, folder, lambda line, is_err: None, lambda line: None, TIMED_ENTRY)
    measurement = RunRecord(folder).measure()
    assert measurement.windows, measurement
    return measurement


@pytest.fixture(scope="module")
def map_baseline(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("map")
    return [timed_run(tmp, f"base{i}", "--shuffle") for i in range(2)]


@pytest.mark.full  # starts processes (a whole run, the CLI, a script): the full tier
def test_shuffled_map_style_loader_with_workers_feeds_the_same_sequence(tmp_path, map_baseline):
    variant = timed_run(tmp_path, "workers", "--shuffle", "--num-workers", "4", workers=4)
    check = check_variant([m.fed for m in map_baseline], [variant.fed], None)
    assert check.verdict == SAME_SEQUENCE, check
    assert check.compared >= 200 and "same order" in check.detail
    # every sample was fingerprinted, at a cost measured on the training thread
    assert variant.fed.unhashable == 0 and variant.fed.batches >= len(variant.fed.fingerprints) // 16
    assert 0 < variant.fed.hash_s / variant.fed.batches < 0.002  # well under 2 ms a batch of 16 on 2 cores
    # the windows count samples new in their epoch: a map-style epoch has no duplicates
    assert all(w.unique_samples == w.samples for w in variant.windows)


@pytest.mark.full  # starts processes (a whole run, the CLI, a script): the full tier
def test_a_wrapper_that_drops_every_other_sample_is_caught(tmp_path, map_baseline):
    variant = timed_run(tmp_path, "dropped", "--shuffle", "--drop-every-other")
    check = check_variant([m.fed for m in map_baseline], [variant.fed], None)
    assert check.verdict == DIFFERENT, check
    assert "of the baseline's samples were never fed" in check.detail


@pytest.mark.full  # starts processes (a whole run, the CLI, a script): the full tier
def test_an_unsharded_stream_read_by_four_workers_feeds_every_sample_four_times(tmp_path):
    baseline = [timed_run(tmp_path, "base", "--stream")]
    variant = timed_run(tmp_path, "workers", "--stream", "--num-workers", "4", workers=4)
    check = check_variant([m.fed for m in baseline], [variant.fed], None)
    assert check.verdict == DIFFERENT, check
    times = float(re.search(r"each sample fed ([\d.]+) times as often as by the baseline", check.detail).group(1))
    assert 3.5 <= times <= 4.5, check
    # unique samples per window: a quarter of what was fed
    fed = sum(w.samples for w in variant.windows)
    assert sum(w.unique_samples for w in variant.windows) <= fed / 3


@pytest.mark.full  # starts processes (a whole run, the CLI, a script): the full tier
def test_a_stream_sharded_across_workers_feeds_the_same_samples(tmp_path):
    baseline = [timed_run(tmp_path, "base", "--stream", "--shard")]
    variant = timed_run(tmp_path, "workers", "--stream", "--shard", "--num-workers", "4", workers=4)
    check = check_variant([m.fed for m in baseline], [variant.fed], None)
    assert check.verdict == SAME_SAMPLES, check  # worker k reads items k, k+4, ...: another order, same samples


@pytest.mark.full  # starts processes (a whole run, the CLI, a script): the full tier
def test_random_items_are_not_checked_and_say_why(map_baseline):
    check = check_variant([m.fed for m in map_baseline], [map_baseline[1].fed], "the dataset returns random items")
    assert check.verdict == UNCHECKED and "random items" in check.detail


@pytest.mark.full  # starts processes (a whole run, the CLI, a script): the full tier
def test_an_unsharded_stream_gets_the_sharding_fix_and_no_worker_experiment(tmp_path):
    out = tmp_path / "run"
    proc = diagnose_cli("run", "--out", str(out), "--warmup", "3", "--steps", "8", "--budget-seconds", "60",
                        str(SAMPLES / "streaming_loader.py"))
    assert proc.returncode == 0, proc.stderr
    d = json.loads((out / "diagnosis.json").read_text())
    [finding] = [f for f in d["findings"] if f["category"] == "data-loading"]
    assert finding["rule"] == "data-loading.unsharded-stream" and "get_worker_info()" in finding["fix_code"]
    assert "streaming_loader.py" in finding["location"]
    assert "not split across workers" in finding["message"]
    workers = [e for e in d["experiments"] if e["optimization"] == "dataloader.num_workers"]
    assert workers and all(e["verdict"] == "skipped" and "replay" in e["reason"] for e in workers)
    assert d["headline"] is None and not (out / "experiments").exists()
    assert "No experiment ran" in proc.stderr and "replay" in proc.stderr
    assert d["metrics"]["dataset_iterable"] == 1 and d["metrics"]["dataset_stream_sharded"] == 0


def _plain_samples_per_s(*args: str) -> float:
    """Samples/s of the unchanged streaming sample run by plain Python over its epochs 2 and 3 (the first one
    starts the workers), timed from its own epoch lines: what a user would see."""
    import subprocess
    import sys
    import time

    command = [sys.executable, "-u", str(SAMPLES / "streaming_loader.py"), "--epochs", "3", *args]
    ends = []
    with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True) as process:
        for line in process.stdout:
            if re.match(r"epoch \d+: \d+ samples fed", line):
                ends.append((time.monotonic(), int(line.split()[2])))
    (t1, _), (t3, n3) = ends[0], ends[2]
    n2 = ends[1][1]
    return (n2 + n3) / (t3 - t1)


@pytest.mark.bench  # a long timing check, run before a release: the bench tier (not in CI)
def test_a_sharded_stream_is_verified_on_unique_samples_and_the_claim_holds_on_a_plain_run(tmp_path):
    out = tmp_path / "run"
    proc = diagnose_cli("run", "--out", str(out), "--warmup", "3", "--steps", "8", "--budget-seconds", "60",
                        str(SAMPLES / "streaming_loader.py"), "--shard")
    assert proc.returncode == 0, proc.stderr
    d = json.loads((out / "diagnosis.json").read_text())
    assert d["findings"][0]["rule"] == "data-loading.slow-loader"
    faster = [e for e in d["experiments"] if e["optimization"] == "dataloader.num_workers" and e["verdict"] == "faster"]
    assert faster, d["experiments"]
    best = max(faster, key=lambda e: e["speedup"])
    assert best["metric"] == "unique samples/s" and best["fidelity"] == "identical", best
    assert best["data_check"] == "same-samples" and not best["fidelity_warning"], best  # worker k reads k, k+N, ...
    assert 0 < best["fingerprint_step_s"] < 0.002
    assert d["headline"]["verdict"] == "faster" and "same samples, reordered" in proc.stderr
    # plain runs, each side three times interleaved, the best of each (a busy machine only slows a run down)
    n = str(best["setting"]["num_workers"])
    pairs = [(_plain_samples_per_s("--shard"), _plain_samples_per_s("--shard", "--num-workers", n)) for _ in range(3)]
    plain, workers = max(p for p, _ in pairs), max(w for _, w in pairs)
    assert best["speedup"] <= 1.25 * workers / plain, (best["speedup"], workers / plain, pairs)


@pytest.mark.slow
def test_workers_that_each_shuffle_the_whole_stream_are_flagged_not_a_headline(tmp_path):
    """The stream reads get_worker_info() but only to seed its own shuffle, so the probe sees workers read
    different items and lets the experiment run; the fingerprints then see what was fed."""
    out = tmp_path / "run"
    proc = diagnose_cli("run", "--out", str(out), "--warmup", "3", "--steps", "8", "--budget-seconds", "45",
                        "--experiments", "dataloader.num_workers", str(FED), "--stream", "--worker-shuffle",
                        "--delay", "0.002")
    assert proc.returncode == 0, proc.stderr
    d = json.loads((out / "diagnosis.json").read_text())
    measured = [e for e in d["experiments"] if e["optimization"] == "dataloader.num_workers" and e["runs"] >= 2]
    assert measured and all(e["verdict"] == "flagged" for e in measured), d["experiments"]
    assert all(e["fidelity"] == "different-data" and "fed other data" in e["fidelity_warning"] for e in measured)
    assert d["headline"] is None or d["headline"]["verdict"] != "faster"
    assert "Verified" not in proc.stderr and "Flagged, not a speedup" in proc.stderr
