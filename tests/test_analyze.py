"""`diagnose analyze` on traces people already have: the real GPU traces in tests/data/traces (recorded on A100,
V100 and MI250 machines) and traces our own runs wrote. Run through the real CLI, as a user would, where what is
checked is the command's (its terminal, its folder, its report); a metric or a finding the analyzers and rules
compute is checked on them in this process (no process start, each fixture read once)."""
from __future__ import annotations

import functools
import gzip
import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import REPO, SCRIPTS, TRACES, diagnose_cli, line_of


def _analyze(path, tmp_path, *options):
    out = tmp_path / "out"
    proc = diagnose_cli("analyze", str(path), "--out", str(out), *options)
    return proc, out


def _diagnosis(out) -> dict:
    return json.loads((out / "diagnosis.json").read_text())


def _rules(diagnosis: dict) -> dict[str, dict]:
    return {f["rule"]: f for f in diagnosis["findings"]}


@functools.lru_cache(maxsize=None)
def _analysis(path: Path):
    """The analysis `diagnose analyze PATH` writes (analysis.json), computed in this process."""
    from diagnose.analysis.sources import analyze_traces, find_traces

    return analyze_traces(find_traces(path))


def _findings(path: Path) -> list:
    """The findings `diagnose analyze PATH` writes into diagnosis.json, in its order, computed in this process."""
    from diagnose.commands.pipeline import diagnose_analysis

    return diagnose_analysis(_analysis(path), ())


def test_host_sync_trace_names_its_syncs_per_step_and_their_source_and_low_utilization(tmp_path):
    proc, out = _analyze(TRACES / "a100_rank0_of16_host_syncs.json.gz", tmp_path)
    assert proc.returncode == 0, proc.stderr
    d = _diagnosis(out)
    findings = _rules(d)
    syncs = findings["host-overhead.syncs"]
    # per step: 6 cudaMemcpyAsync into pageable memory (704-byte DtoH copies that hold the host ~145 ms of a
    # 215 ms step), each followed by a cudaStreamSynchronize (one sync, as .item() makes them), and 9 more
    # cudaStreamSynchronize; the device sync after the last step is not a step's
    assert d["metrics"]["syncs_per_step"] == pytest.approx(15.0)
    assert ("synchronises host and GPU 15 time(s)" in syncs["message"]
            and "6 of them blocking copies" in syncs["message"])
    assert "cudaStreamSynchronize in aten::to (9.0/step); cudaMemcpyAsync in aten::to (6.0/step)" in syncs["message"]
    assert d["findings"][0] == syncs and syncs["severity"] == "high"
    assert d["metrics"]["gpu_idle_sync_frac"] > 0.4 and d["metrics"]["gpu_idle_runtime_frac"] < 0.1
    assert any(f["category"] == "utilization" and f["severity"] == "high" for f in d["findings"])
    assert d["metrics"]["gpu_busy_frac"] < 0.5  # torch-tb-profiler: kernel 32%
    report = (out / "report.html").read_text()
    assert 'id="gpu"' in report and "cudaStreamSynchronize" in report
    assert "GPU mostly idle" in proc.stderr  # the terminal summary


def test_kernel_heavy_trace_is_busy_but_told_its_fp32_kernels_skip_the_tensor_cores():
    path = TRACES / "v100_single_rank_kernel_heavy.json.gz"
    analysis = _analysis(path)
    assert analysis.breakdown["compute"] > 0.9
    # the GPU is not idle; but whether autocast ran is unknown from a trace, and its volta_sgemm kernels say no
    assert [f.rule for f in _findings(path) if f.category == "utilization"] == ["utilization.tensor-cores-unused"]
    assert analysis.metrics["fp32_gemm_frac"] == pytest.approx(0.36, abs=0.02)  # inside the steps, overlaps once


def test_pageable_copies_without_profiler_steps_give_a_transfer_finding(tmp_path):
    proc, out = _analyze(TRACES / "a100_alexnet_pageable_h2d.json.gz", tmp_path)
    assert proc.returncode == 0, proc.stderr
    d = _diagnosis(out)
    pageable = _rules(d)["transfer.pageable-h2d"]
    assert "16 pageable copies per step" in pageable["message"]
    assert d["metrics"]["h2d_pageable_frac"] == pytest.approx(1.0)
    assert "no ProfilerStep markers" in (out / "report.html").read_text()  # the fallback step is stated


def test_a_folder_of_ranks_gives_a_per_rank_table(tmp_path):
    proc, out = _analyze(TRACES / "two_ranks", tmp_path)
    assert proc.returncode == 0, proc.stderr
    d = _diagnosis(out)
    assert [r["rank"] for r in d["ranks"]] == [0, 1]
    for r in d["ranks"]:
        assert r["step_time_s"] > 0 and abs(sum(r["breakdown"].values()) - 1) < 1e-6
        assert 0 < r["collective_wait_frac"] < 1  # NCCL kernels
    assert all(f["message"].startswith("rank 0: ") for f in d["findings"])
    report = (out / "report.html").read_text()
    assert 'id="ranks"' in report and "rank-1.json.gz" in report


@pytest.mark.parametrize("name", ["rocm_mi250_toy.json.gz", "cpu_only_gloo_rank34.json.gz",
                                  "cpu_only_with_dataloader.json.gz", "a100_nccl_rank0_of2.json.gz"])
def test_other_traces_are_analysed_without_error(tmp_path, name):
    """The analyze command's whole path in this process (reading, analysis, rules, diagnosis, report); the CLI's
    own process is run by the tests above and below."""
    from diagnose.commands.analyze import analyze_and_report

    out = tmp_path / "out"
    _, code = analyze_and_report(TRACES / name, out=str(out), jobs=1)
    assert code == 0
    assert (out / "report.html").exists() and _diagnosis(out)["steps_profiled"] >= 1


def test_plain_json_and_a_bare_event_list_are_accepted(tmp_path):
    events = json.loads(gzip.decompress((TRACES / "rocm_mi250_toy.json.gz").read_bytes()))["traceEvents"]
    bare = tmp_path / "events.json"
    bare.write_text(json.dumps(events))
    assert _analysis(bare).metrics["has_gpu"] == 1


def test_gpu_idle_time_is_split_by_what_the_host_did():
    m = _analysis(TRACES / "a100_nccl_rank0_of2.json.gz").metrics
    parts = ["data_wait", "sync", "runtime", "cpu_ops", "python"]
    assert sum(m[f"gpu_idle_{p}_frac"] for p in parts) == pytest.approx(m["gpu_idle_frac"])
    # torch-tb-profiler on this trace: kernel 23%, CPU exec 65%: the host runs ops while the GPU waits
    assert m["gpu_idle_cpu_ops_frac"] > 0.4 and m["gpu_busy_frac"] < 0.3


def test_sync_sources_name_the_torch_op_around_each_sync():
    ops = {s.op: s.per_step for s in _analysis(TRACES / "a100_ddp_rank3_of8.json.gz").syncs}
    assert ops["aten::item"] == pytest.approx(3.0) and ops["aten::to"] == pytest.approx(6.0)


@pytest.mark.full  # starts processes (a whole run, the CLI, a script): the full tier
def test_a_data_loading_bound_trace_gets_the_finding_and_a_compute_bound_one_does_not(sample_run):
    slow = sample_run("slow_loader.py")
    loading = {f.rule: f for f in _findings(slow.run_dir / "tb")}["data-loading.slow-loader"]
    assert loading.severity == "high"
    assert _analysis(slow.run_dir / "tb").breakdown["data_wait"] == pytest.approx(
        slow.diagnosis["breakdown"]["data_wait"], abs=0.05)
    # a loader that is not the bottleneck (on this 2-core machine even 2 workers for the tiny slow_loader model
    # leave it waiting a third of its 1 ms step, so the counterpart is the compute-bound sample)
    fixed = sample_run("healthy.py")
    assert not [f for f in _findings(fixed.run_dir / "tb")
                if f.category == "data-loading" and f.severity in ("medium", "high")]


def test_missing_path_empty_folder_and_non_trace_are_clear_errors(tmp_path):
    proc = diagnose_cli("analyze", str(tmp_path / "nope.json"))
    assert proc.returncode == 2 and "trace not found" in proc.stderr and "Traceback" not in proc.stderr
    empty = tmp_path / "empty"
    empty.mkdir()
    proc = diagnose_cli("analyze", str(empty))
    assert proc.returncode == 2 and "no trace files" in proc.stderr
    bad = tmp_path / "bad.json"
    bad.write_text('{"hello": 1}')
    proc = diagnose_cli("analyze", str(bad), "--out", str(tmp_path / "o"))
    assert proc.returncode == 2 and "not a Chrome trace" in proc.stderr and "Traceback" not in proc.stderr


def test_out_folder_is_never_overwritten(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    proc = diagnose_cli("analyze", str(TRACES / "rocm_mi250_toy.json.gz"), "--out", str(out))
    assert proc.returncode == 2 and "already exists" in proc.stderr
    assert (out / "keep.txt").read_text() == "mine"
    # refused before the trace is read (a big one takes minutes): a file that is no trace is not looked at
    bad = tmp_path / "bad.json"
    bad.write_text('{"hello": 1}')
    proc = diagnose_cli("analyze", str(bad), "--out", str(out))
    assert proc.returncode == 2 and "already exists" in proc.stderr and "not a Chrome trace" not in proc.stderr


@pytest.mark.full  # starts processes (a whole run, the CLI, a script): the full tier
def test_analyze_does_not_import_torch():
    # a big trace should cost its parsing, not torch's start-up
    code = "import sys, diagnose.commands.analyze, diagnose.commands.compare; print('torch' in sys.modules)"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO)
    assert result.stdout.strip() == "False", result.stderr


def test_analyze_builds_its_diagnosis_without_entering_experiments(tmp_path):
    """issue 54: a trace's verdict (predictions, the run's cost) comes from diagnose/verdict/; the experiments'
    machinery (patches, the scheduler, torch's start-up) is not a trace reader's to load. The command as the CLI runs
    it, then the modules it left loaded."""
    out = tmp_path / "out"
    code = ("import sys\nfrom diagnose.cli import cli\n"
            f"try:\n    cli.main(['analyze', {str(TRACES / 'cpu_only_gloo_rank34.json.gz')!r}, '--out', {str(out)!r}],"
            " standalone_mode=False)\nexcept SystemExit:\n    pass\n"
            "import json\nprint(json.dumps(sorted(m for m in sys.modules if m.startswith(('diagnose.experiments', "
            "'diagnose.verdict')))))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=120)
    loaded = json.loads(done.stdout.strip().splitlines()[-1])
    assert (out / "diagnosis.json").exists(), done.stderr[-2000:]
    assert "diagnose.verdict.diagnosis" in loaded  # the hook saw the command run
    assert [m for m in loaded if m.startswith("diagnose.experiments")] == []


def test_renamed_rank_traces_without_distributed_info_are_ranked_by_order(tmp_path):
    folder = tmp_path / "job"
    folder.mkdir()
    for name in ("cpu_only_with_dataloader.json.gz", "rocm_mi250_toy.json.gz"):
        shutil.copy(TRACES / name, folder / name)
    proc, out = _analyze(folder, tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert [r["rank"] for r in _diagnosis(out)["ranks"]] == [0, 1]


@pytest.mark.full  # starts processes (a whole run, the CLI, a script): the full tier
def test_a_run_folder_or_a_trace_folder_with_other_json_files_is_read_for_its_traces(tmp_path, sample_run):
    run = sample_run("slow_loader.py")
    proc, out = _analyze(run.run_dir, tmp_path)  # holds capture.json, diagnosis.json... and tb/
    assert proc.returncode == 0, proc.stderr
    assert "data-loading.slow-loader" in _rules(_diagnosis(out))


@pytest.mark.full  # starts processes (a whole run, the CLI, a script): the full tier
def test_a_with_stack_trace_the_user_recorded_points_at_their_function_and_their_loop(tmp_path):
    # torch.profiler as the docs show it, with_stack=True, writing into a log folder beside the script
    script = Path(shutil.copy(SCRIPTS / "records_its_own_trace.py", tmp_path))
    recorded = subprocess.run([sys.executable, str(script), str(tmp_path / "log")], capture_output=True, text=True,
                              timeout=120)
    assert recorded.returncode == 0, recorded.stderr
    proc, out = _analyze(tmp_path / "log", tmp_path)
    assert proc.returncode == 0, proc.stderr
    d = _diagnosis(out)
    host = _rules(d)["host-overhead.per-step-work"]
    assert host["location"].endswith(f"records_its_own_trace.py:{line_of(script, 'def log_to_disk')}")
    assert d["findings"][0] == host
    analysis = json.loads((out / "analysis.json").read_text())
    # where the DataLoader is made is not in a trace: no line is claimed for the loader's fix
    assert analysis["locations"]["loader"] is None
    top = analysis["host_lines"][0]
    assert not top["in_torch"] and "def log_to_disk" in top["code"]
    # its 8 ms sleep: at least that, and within the step (a loaded machine oversleeps; the step oversleeps with it)
    assert 0.0075 < top["seconds_per_step"] <= analysis["step_time_s"]["mean"]
    assert any("Python frames" in n for n in analysis["notes"])
    assert "def log_to_disk" in (out / "report.html").read_text()


def test_events_without_usable_times_and_non_event_entries_are_skipped_not_fatal(tmp_path):
    events = json.loads(gzip.decompress((TRACES / "cpu_only_with_dataloader.json.gz").read_bytes()))["traceEvents"]
    broken = [*events, {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": 5, "dur": None}, 7, "x",
              {"ph": "X", "cat": "cpu_op", "name": 12, "ts": 1.0, "dur": "3"}]
    path = tmp_path / "edited.json"
    path.write_text(json.dumps(broken))
    proc, out = _analyze(path, tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert (out / "report.html").is_file() and "Traceback" not in proc.stderr
    only_numbers = tmp_path / "numbers.json"
    only_numbers.write_text("[1, 2, 3]")
    proc, _ = _analyze(only_numbers, tmp_path / "n")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr


@pytest.mark.full  # starts processes (a whole run, the CLI, a script): the full tier
def test_report_on_a_run_whose_capture_json_was_cut_short_names_the_file(sample_run, tmp_path):
    run_dir = tmp_path / "run"
    shutil.copytree(sample_run("healthy.py").run_dir, run_dir)
    capture = run_dir / "capture.json"
    capture.write_bytes(capture.read_bytes()[:200])
    proc = diagnose_cli("report", str(run_dir))
    assert proc.returncode == 2 and f"cannot read {capture}" in proc.stderr and "Traceback" not in proc.stderr


def test_a_trace_cut_short_is_refused_not_analysed_as_if_whole(tmp_path):
    whole = gzip.decompress((TRACES / "a100_ddp_rank3_of8.json.gz").read_bytes())
    cut = tmp_path / "cut.json"
    cut.write_bytes(whole[:300_000])  # 6 steps in the whole trace; the cut one would look like 1, 93% host
    proc, out = _analyze(cut, tmp_path)
    assert proc.returncode == 2 and "looks cut short" in proc.stderr and not out.exists()


def test_an_out_folder_that_cannot_be_made_is_a_clear_error(tmp_path):
    (tmp_path / "file.txt").write_text("mine")
    proc, _ = _analyze(TRACES / "rocm_mi250_toy.json.gz", tmp_path, "--out", str(tmp_path / "file.txt" / "sub"))
    assert proc.returncode == 2 and "cannot create the run folder" in proc.stderr and "Traceback" not in proc.stderr


def test_a_cpu_trace_without_python_frames_still_names_host_overhead_as_the_bottleneck(tmp_path):
    proc, out = _analyze(TRACES / "cpu_only_with_dataloader.json.gz", tmp_path)
    assert proc.returncode == 0, proc.stderr
    d = _diagnosis(out)
    assert d["breakdown"]["host_overhead"] > 0.5
    top = d["findings"][0]
    assert top["rule"] == "host-overhead.unattributed" and "with_stack=True" in top["fix"]
    assert d["metrics"]["host_top_line_frac"] is None  # unknown, not zero: nothing could name a line


def test_time_in_other_libraries_belongs_to_the_users_function_not_to_torch():
    # frames as a with_stack trace has them: train() -> log_metrics() -> wandb.log() -> json (stdlib),
    # then train() -> torch.optim's step
    from diagnose.analysis.frames import innermost_segments
    from diagnose.trace.spans import Spans

    tid = (1, 1)
    python = Spans.of([(0, 100, "train.py(10): train", tid), (10, 40, "train.py(30): log_metrics", tid),  # ts, dur
                       (12, 36, "wandb/sdk/wandb_run.py(1700): log", tid),
                       (20, 20, "json/encoder.py(183): encode", tid),
                       (60, 30, "torch/optim/sgd.py(80): step", tid)])
    frames = innermost_segments(python, tid)
    busy = np.array([[0.0, 100.0]])
    by_place = frames.time_by_location(busy)
    assert by_place[("train.py:30", False)] == pytest.approx(40)  # wandb and json: the user's logging
    assert by_place[("train.py:10", True)] == pytest.approx(30)  # torch's optimizer: framework time
    assert by_place[("train.py:10", False)] == pytest.approx(30)


def _walked(python, tid):
    from diagnose.analysis import frames

    idx = np.flatnonzero(python.thread_mask(lambda t: t == tid))
    return frames._walked_segments(python.take(idx[np.lexsort((-python.end[idx], python.start[idx]))]))


def _assert_same_segments(a, b) -> None:
    assert np.array_equal(a.intervals, b.intervals) and a.locations == b.locations
    assert np.array_equal(a.in_library, b.in_library)


@pytest.mark.parametrize("cutter", ["arrays", "compiled walk"])
def test_frames_cut_by_array_operations_as_the_stack_walk_cuts_them(cutter, monkeypatch):
    # a with_stack trace's frames (torch 2.13, 1,816 of them, two outliving their parent by a rounding's
    # nanosecond), and written cases: empty frames, a built-in at a frame's very end, a child that outlives its
    # parent, equal starts; cut by array operations (a small trace) or by the walk compiled (a big one's)
    from diagnose.analysis.frames import innermost_segments
    from diagnose.trace import jitscan
    from diagnose.trace.load import load_trace
    from diagnose.trace.spans import Spans

    if cutter == "compiled walk":
        if not jitscan.usable():
            pytest.skip("numba is not installed here")
        monkeypatch.setattr(jitscan, "for_size", lambda size: jitscan._kernels())
    trace = load_trace(TRACES / "torch213_cpu" / "mlp_stack_memory.pt.trace.json.gz")
    cut, walked = innermost_segments(trace.python, trace.main_thread), _walked(trace.python, trace.main_thread)
    _assert_same_segments(cut, walked)
    assert cut.location_codes is not None and walked.location_codes is None  # as codes; by the Python walk
    halves = np.column_stack([cut.intervals[::2, 0], cut.intervals[::2].mean(axis=1)])  # busy with holes
    by_arrays, by_loop = cut.time_by_location(halves), walked.time_by_location(halves)
    assert by_arrays == by_loop and list(by_arrays) == list(by_loop) and by_arrays  # sums, and their order
    tid = (1, 1)
    python = Spans.of([(0, 100, "train.py(10): train", tid), (0, 50, "torch/nn/module.py(1): __call__", tid),
                       (5, 0, "<built-in method add>", tid), (5, 10, "model.py(7): forward", tid),
                       (15, 0, "train.py(20): empty", tid), (40, 70, "train.py(30): log", tid),
                       (45, 80, "wandb/sdk/run.py(1): log", tid), (100, 0, "<built-in function len>", tid),
                       (120, 10, "train.py(40): later", tid), (125, 5, "json/encoder.py(1): encode", tid)])
    assert len(innermost_segments(python, tid)) > 5
    _assert_same_segments(innermost_segments(python, tid), _walked(python, tid))


@pytest.mark.full  # starts processes (a whole run, the CLI, a script): the full tier
def test_analyze_help_and_a_small_trace_import_only_what_they_use(tmp_path):
    # issue 20: start-up counts; --help loads no numpy, and a small trace no numba nor torch
    def imported(*args: str) -> str:
        done = subprocess.run([sys.executable, "-X", "importtime", "-m", "diagnose", "analyze", *args],
                              capture_output=True, text=True, cwd=REPO, timeout=120)
        return done.stderr

    help_imports = imported("--help")
    assert "diagnose.cli" in help_imports and " numpy" not in help_imports and " torch" not in help_imports
    trace_imports = imported(str(TRACES / "cpu_only_with_dataloader.json.gz"), "--out", str(tmp_path / "out"))
    assert "diagnose.trace.load" in trace_imports
    assert " numba" not in trace_imports and " torch" not in trace_imports
