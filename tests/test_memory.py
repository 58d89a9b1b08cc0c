"""Memory: what the peak of a step is made of and where it falls, an out-of-memory error diagnosed (not a crash),
and --memory-limit to make one on a machine with room to spare. Real runs of real torch; the GPU case on a
recorded H200 trace."""
from __future__ import annotations

import json

import pytest
from conftest import SCRIPTS, TRACES, assert_matches_schema, diagnose_cli, run_script

from diagnose.capture.runner import run_in_child
from diagnose.experiments.memory_fit import probe_result
from diagnose.experiments.scheduler import TIMED_ENTRY, Arm, child_environment
from diagnose.model import Change, Measurement, MeasurePlan, RunConfig
from diagnose.record.run_record import RunRecord

OUTGROWS = SCRIPTS / "outgrows_memory.py"
HEAVY = SCRIPTS / "activation_heavy.py"  # ~0.1 MiB of activations a sample, light compute: runs out at 8192
LIMIT = "700MB"
UNDER_LIMIT = SCRIPTS / "under_memory_limit.py"
WIDTH, BATCH, FEATURES, CLASSES = 1024, 256, 512, 10


@pytest.fixture(scope="module")
def mlp_run(tmp_path_factory):
    run = run_script(OUTGROWS, "--width", str(WIDTH), "--batch-size", str(BATCH),
                     out=tmp_path_factory.mktemp("mlp") / "run",
                     options=("--warmup", "3", "--steps", "6", "--experiments", "none"))
    assert run.returncode == 0, run.stderr
    return run


def _parts(memory: dict) -> dict[str, int]:
    return {p["name"]: p["bytes"] for p in memory["parts"]}


@pytest.mark.full  # starts processes (a whole run, the CLI, a script): the full tier
def test_the_sizes_behind_the_peak_match_the_model(mlp_run):
    sizes = json.loads((mlp_run.run_dir / "capture.json").read_text())["memory_sizes"]
    params = 4 * (FEATURES * WIDTH + WIDTH + WIDTH * WIDTH + WIDTH + WIDTH * CLASSES + CLASSES)
    assert abs(sizes["parameters_bytes"] / params - 1) < 0.02
    assert abs(sizes["gradients_bytes"] / params - 1) < 0.02
    assert abs(sizes["optimizer_state_bytes"] / (2 * params) - 1) < 0.02  # AdamW: exp_avg and exp_avg_sq
    # saved for backward, by hand: the input (first Linear), each ReLU's output (the next Linear's input too),
    # log_softmax's output and the targets
    saved = 4 * BATCH * (FEATURES + WIDTH + WIDTH + CLASSES) + 8 * BATCH
    assert abs(sizes["activations_bytes"] / saved - 1) < 0.3, (sizes["activations_bytes"], saved)


@pytest.mark.full  # starts processes (a whole run, the CLI, a script): the full tier
def test_the_parts_add_up_to_the_peak_and_say_where_it_falls(mlp_run):
    memory = mlp_run.diagnosis["memory"]
    assert memory["device"] == "cpu" and memory["peak_bytes"] > 0
    assert sum(_parts(memory).values()) == memory["peak_bytes"]
    assert memory["peak_phase"] in ("forward", "backward", "optimizer")
    assert {"parameters", "optimizer state", "other"} <= set(_parts(memory))
    assert memory["limit_source"] == "the machine's memory"
    assert len(memory["timeline_s"]) == len(memory["timeline_bytes"]) == len(memory["timeline_phase"]) > 10
    assert max(memory["timeline_bytes"]) == memory["peak_bytes"]
    html = (mlp_run.run_dir / "report.html").read_text()
    assert 'id="memory"' in html and 'id="memory-timeline"' in html and "of tensors, in " in html
    assert "of tensors" not in mlp_run.stderr  # far from the machine's memory: the terminal leaves it to the report


def test_the_peak_phase_of_the_h200_transformer_is_the_end_of_forward():
    """A GPU trace alone (no run): the allocator's totals are absolute, so the peak is read off them."""
    from diagnose.analysis.analyze import Inputs, analyze
    from diagnose.trace.load import load_trace

    trace = load_trace(TRACES / "h200" / "transformer_bf16.pt.trace.json.gz")
    memory = analyze(Inputs(trace)).memory
    cuda = trace.memory.device_type == 1
    in_steps = [a for t, a in zip(trace.memory.ts[cuda], trace.memory.allocated[cuda])
                if any(s <= t < e for s, e in trace.steps.intervals())]
    assert memory.device == "cuda" and memory.peak_bytes == max(in_steps)
    assert memory.peak_phase == "forward"  # activations are all alive when forward ends
    assert memory.reserved_bytes >= memory.peak_bytes
    convnet = analyze(Inputs(load_trace(TRACES / "h200" / "convnet_fp32.pt.trace.json.gz"))).memory
    assert convnet.peak_phase == "backward"


def test_memory_outside_torch_is_nvml_used_beyond_what_the_allocator_reserved():
    """Made-up NVML samples (no GPU here) beside a real H200 trace: 2 GiB more in use than torch ever reserved."""
    from diagnose.analysis.analyze import Inputs, analyze
    from diagnose.model import Samples
    from diagnose.trace.load import load_trace

    trace = load_trace(TRACES / "h200" / "transformer_bf16.pt.trace.json.gz")
    reserved = int(trace.memory.reserved.max())
    samples = Samples(t_s=(0.0, 1.0), gpu_mem_used_bytes=(reserved, reserved + 2 * 2**30),
                      gpu_mem_total_bytes=141 * 10**9)
    analysis = analyze(Inputs(trace, samples=samples))
    assert analysis.memory.outside_torch_bytes == 2 * 2**30 and analysis.memory.limit_bytes == 141 * 10**9
    assert abs(analysis.metrics["memory_outside_torch_frac"] - 2 * 2**30 / (141 * 10**9)) < 1e-9


@pytest.mark.full  # starts processes (a whole run, the CLI, a script): the full tier
def test_running_out_of_memory_is_a_diagnosis_with_its_own_exit_code(tmp_path):
    script_before = HEAVY.read_bytes()
    run = run_script(HEAVY, "--batch-size", "8192", out=tmp_path / "run",
                     options=("--warmup", "2", "--steps", "3", "--experiments", "none", "--memory-limit", "700MB"))
    assert run.returncode == 5, run.stderr
    d = run.diagnosis
    assert d["status"] == "out_of_memory"
    oom = d["out_of_memory"]
    assert oom["limit_bytes"] == 700 * 10**6 and oom["limit_source"] == "--memory-limit" and oom["device"] == "cpu"
    assert oom["requested_bytes"] > 0 and oom["phase"] in ("forward", "backward", "optimizer")
    assert oom["step"] >= 0 and oom["in_use_bytes"] + oom["requested_bytes"] > 0.9 * oom["limit_bytes"]
    assert f"Out of memory at step {oom['step']}, in " in run.stderr and " of tensors" in run.stderr
    # the breakdown as far as it got: from the profiled steps before it failed, or estimated from the sizes
    assert d["memory"]["peak_bytes"] > 0 and d["memory"]["parts"]
    assert "Out of memory" in (run.run_dir / "report.html").read_text()
    assert HEAVY.read_bytes() == script_before
    assert_matches_schema("diagnosis", run.run_dir / "diagnosis.json")  # an out-of-memory run's diagnosis


@pytest.mark.full  # starts processes (a whole run, the CLI, a script): the full tier
def test_the_same_script_fits_under_the_limit_with_a_smaller_batch(tmp_path):
    run = run_script(OUTGROWS, "--batch-size", "256", out=tmp_path / "run",
                     options=("--warmup", "2", "--steps", "3", "--experiments", "none", "--memory-limit", "700MB"))
    assert run.returncode == 0, run.stderr
    assert run.diagnosis["status"] == "completed" and run.diagnosis["memory"]["limit_bytes"] == 700 * 10**6
    assert_matches_schema("diagnosis", run.run_dir / "diagnosis.json")  # under --memory-limit


@pytest.mark.parametrize("bad", ["lots", "12", "-3GB", "5XB"])
@pytest.mark.full  # starts processes (a whole run, the CLI, a script): the full tier
def test_a_memory_limit_that_is_not_a_size_is_refused(tmp_path, bad):
    proc = diagnose_cli("run", "--out", str(tmp_path / "run"), "--memory-limit", bad, str(OUTGROWS))
    assert proc.returncode == 2 and "--memory-limit" in proc.stderr and "Traceback" not in proc.stderr
    assert not (tmp_path / "run").exists()


def _plain_under_limit(*script_args: str) -> int:
    """The script's exit code run plainly (no diagnose) under the same limit: 0 when it fits, 5 when it does not."""
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, str(UNDER_LIMIT), str(700 * 10**6), str(HEAVY), *script_args],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode in (0, 5), proc.stderr[-2000:]
    return proc.returncode


@pytest.mark.full  # a whole run, timed by nothing it asserts: the full tier (it runs beside another test)
@pytest.mark.timeout(600)  # a 300 s experiment budget, its capture, then a plain run of the variant found
def test_a_run_out_of_memory_gets_a_variant_that_fits_and_keeps_the_effective_batch(tmp_path):
    script_before = HEAVY.read_bytes()
    run = run_script(HEAVY, "--batch-size", "8192", out=tmp_path / "run",
                     options=("--warmup", "2", "--steps", "3", "--memory-limit", LIMIT, "--budget-seconds", "300"))
    assert run.returncode == 5, run.stderr  # the script as written still does not fit
    d = run.diagnosis
    assert_matches_schema("diagnosis", run.run_dir / "diagnosis.json")  # the memory levers and the batch search
    assert d["status"] == "out_of_memory" and d["memory"]["parts"]
    # the fewest micro-batches that fit the measured batch, and twice as many (more headroom): at least one fits
    tried = [e for e in d["experiments"] if e["optimization"] == "grad_accumulation"]
    counts = [e["setting"]["micro_batches"] for e in tried]
    assert len(counts) == 2 and counts[1] == 2 * counts[0], tried
    assert 8192 // counts[0] <= d["batch_search"]["largest_fitting"]
    accumulation = next((e for e in tried if e["verdict"] == "fits"), tried[0])
    setting = accumulation["setting"]
    assert accumulation["verdict"] == "fits", accumulation["reason"]
    assert setting["micro_batches"] * setting["batch_size"] == 8192  # the same effective batch
    search = d["batch_search"]  # the micro-batch comes from the first batch measured to fit (the search after)
    assert setting["batch_size"] <= search["largest_fitting"] < search["smallest_failing"] <= 8192
    assert accumulation["peak_memory_bytes"] <= 700 * 10**6 == accumulation["limit_bytes"]
    assert accumulation["throughput"] > 0 and accumulation["throughput_ci"][0] <= accumulation["throughput"]
    # every lever reports whether it fits; the headline is the fastest that does
    assert {e["verdict"] for e in d["experiments"]} <= {"fits", "out-of-memory", "skipped"}
    fastest = max((e for e in d["experiments"] if e["verdict"] == "fits"), key=lambda e: e["throughput"])
    assert d["headline"]["verdict"] == "fits" and d["headline"]["throughput"] == fastest["throughput"]
    assert "Fits: " in run.stderr + run.stdout and "samples/s" in (run.run_dir / "report.html").read_text()
    assert HEAVY.read_bytes() == script_before
    # and the fitting variant's micro-batch runs plainly under the limit
    assert _plain_under_limit("--batch-size", str(setting["batch_size"]), "--steps", "12") == 0


@pytest.mark.full  # a whole run, timed by nothing it asserts: the full tier (it runs beside another test)
def test_the_largest_batch_found_fits_plainly_and_twice_it_does_not(tmp_path):
    run = run_script(HEAVY, "--batch-size", "256", out=tmp_path / "run",
                     options=("--warmup", "3", "--steps", "5", "--memory-limit", LIMIT, "--experiments", "batch_size",
                              "--budget-seconds", "150"))
    assert run.returncode == 0, run.stderr
    assert_matches_schema("diagnosis", run.run_dir / "diagnosis.json")  # a batch search and its experiments
    search = run.diagnosis["batch_search"]
    largest = search["largest_fitting"]
    assert search["limit_bytes"] == 700 * 10**6 and search["limit_source"] == "--memory-limit"
    assert search["per_sample_bytes"] > 0 and search["predicted_batch"] > 256
    # bisected to an eighth of the batch, or stopped by its run limit and saying so (allocators make memory jump)
    assert largest >= 2048 and largest < search["smallest_failing"], search
    assert search["smallest_failing"] - largest <= largest // 8 or "short runs were spent" in search["note"], search
    assert "Largest batch that fits in" in run.stderr + run.stdout
    assert _plain_under_limit("--batch-size", str(largest), "--steps", "12") == 0
    assert _plain_under_limit("--batch-size", str(2 * largest), "--steps", "12") == 5
    # the batch_size settings stop at what fits
    sizes = [e["setting"]["batch_size"] for e in run.diagnosis["experiments"] if e["optimization"] == "batch_size"
             and e["setting"]]
    assert sizes and max(sizes) <= largest


def _short_run(tmp_path, name: str, batch: int, *changes: Change) -> Measurement:
    """One short run as the batch search makes it (three steps, one window) under the 700 MB limit."""
    folder = tmp_path / name
    folder.mkdir()
    arm = Arm("probe", {}, (Change("batch_size", {"batch_size": batch}), *changes))
    plan = MeasurePlan(changes=arm.changes, warmup_steps=2, warmup_s=0.0, window_s=0.0, min_window_steps=1,
                       max_window_steps=1, windows=1, min_windows=1)
    config = RunConfig(script=str(HEAVY), script_args=("--steps", "50"), out_dir=str(folder), warmup_steps=0,
                       profile_steps=0, max_seconds=120, measure=plan, memory_limit_bytes=700 * 10**6,
                       environment=child_environment(arm))
    run_in_child(config, folder, lambda line, is_err: None, lambda line: None, TIMED_ENTRY)
    return RunRecord(folder).measure()


@pytest.mark.full  # starts processes (a whole run, the CLI, a script): the full tier
def test_a_short_run_says_whether_a_batch_fits_and_its_peak_against_the_limit(tmp_path):
    fits = probe_result(1024, _short_run(tmp_path, "fits", 1024))
    assert fits.fits and not fits.out_of_memory and 100 * 2**20 < fits.peak_bytes < 700 * 10**6
    too_big = probe_result(8192, _short_run(tmp_path, "too-big", 8192))
    assert not too_big.fits and too_big.out_of_memory and "can't allocate memory" in too_big.detail


@pytest.mark.full  # starts processes (a whole run, the CLI, a script): the full tier
def test_an_allocator_setting_reaches_the_child_before_torch_starts(tmp_path):
    measurement = _short_run(tmp_path, "segments", 256, Change("expandable_segments", {}))
    assert "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True" in measurement.applied


@pytest.mark.full  # a whole run, timed by nothing it asserts: the full tier (it runs beside another test)
def test_a_model_that_fits_at_no_batch_size_says_so_and_why(tmp_path):
    run = run_script(SCRIPTS / "params_too_big.py", out=tmp_path / "run",
                     options=("--warmup", "2", "--steps", "3", "--memory-limit", LIMIT, "--budget-seconds", "120"))
    assert run.returncode == 5, run.stderr
    d = run.diagnosis
    search = d["batch_search"]
    assert search["largest_fitting"] is None and 1 in [p["batch_size"] for p in search["probes"]]
    assert search["note"].startswith("does not fit even with a batch of 1: parameters 384.2 MiB")
    assert "shard them across GPUs (FSDP, ZeRO)" in search["note"]
    assert d["headline"] is None and all(e["verdict"] in ("out-of-memory", "skipped") for e in d["experiments"])
    accumulation = next(e for e in d["experiments"] if e["optimization"] == "grad_accumulation")
    assert accumulation["reason"].startswith("no micro-batch fits: does not fit even with a batch of 1")
    assert "None of the 2 variants tried fits" in run.stdout + run.stderr
