"""benchmarks/make_trace.py writes a trace that diagnose reads like a real one (HTA is not tested here: CI lacks it)."""
from __future__ import annotations

import collections
import gzip
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from diagnose.analysis.analyze import Inputs, analyze
from diagnose.trace.load import load_trace

ROOT = Path(__file__).resolve().parents[1]
MAKE_TRACE = ROOT / "benchmarks" / "make_trace.py"


@pytest.fixture(scope="module")
def generated(tmp_path_factory):
    path = tmp_path_factory.mktemp("bench") / "synthetic.json.gz"
    done = subprocess.run([sys.executable, str(MAKE_TRACE), str(path), "--events", "20000", "--steps", "7",
                           "--seed", "3"], capture_output=True, text=True, timeout=120, check=True)
    return path, json.loads(done.stdout)


@pytest.mark.full  # starts processes (a whole run, the CLI, a script): the full tier
def test_generated_trace_loads_and_analyzes(generated):
    path, counts = generated
    assert counts["steps"] == 7
    assert 18_000 <= counts["events"] <= 22_000
    trace = load_trace(path)
    assert len(trace.steps) == 7
    assert len(trace.kernels) == counts["kernels"]
    assert len(trace.dataloader) == 7
    analysis = analyze(Inputs(trace))
    assert len(analysis.steps) == 7
    busy = analysis.metrics["gpu_busy_frac"]
    assert busy is not None and 0 < busy < 1
    assert analysis.metrics["item_calls_per_step"] >= 1


def test_generated_trace_links_launches_like_kineto(generated):
    path, counts = generated
    data = json.loads(gzip.decompress(path.read_bytes()))
    assert data["schemaVersion"] == 1 and data["distributedInfo"]["rank"] == 0
    assert len(data["traceEvents"]) == counts["events"]
    by_cat = collections.defaultdict(list)
    for e in data["traceEvents"]:
        by_cat[(e["ph"], e.get("cat"))].append(e)
    runtime = {e["args"]["correlation"]: e for e in by_cat[("X", "cuda_runtime")]}
    gpu = by_cat[("X", "kernel")] + by_cat[("X", "gpu_memcpy")] + by_cat[("X", "gpu_memset")]
    for e in gpu:
        launch = runtime[e["args"]["correlation"]]
        assert e["ts"] >= launch["ts"] + launch["dur"] or e["cat"] == "gpu_memcpy"
        assert e["pid"] == e["args"]["device"] and e["tid"] == e["args"]["stream"]
    starts = {e["id"] for e in by_cat[("s", "ac2g")]}
    ends = {e["id"] for e in by_cat[("f", "ac2g")]}
    assert starts == ends == {e["args"]["correlation"] for e in gpu}
    names = {e["name"] for e in gpu}
    assert {"Memcpy HtoD (Pageable -> Device)", "Memcpy HtoD (Pinned -> Device)", "Memset (Device)"} <= names
    # HolisticTraceAnalysis finds the rank with this regex, line by line
    assert '"rank": 0' in gzip.decompress(path.read_bytes()).decode()[:5000]


@pytest.mark.full  # starts processes (a whole run, the CLI, a script): the full tier
def test_generated_trace_is_deterministic(tmp_path, generated):
    path, _ = generated
    again = tmp_path / "again.json.gz"
    subprocess.run([sys.executable, str(MAKE_TRACE), str(again), "--events", "20000", "--steps", "7", "--seed", "3"],
                   capture_output=True, timeout=120, check=True)
    assert gzip.decompress(again.read_bytes()).replace(str(again).encode(), b"") == \
        gzip.decompress(path.read_bytes()).replace(str(path).encode(), b"")


@pytest.mark.full  # starts processes (a whole run, the CLI, a script): the full tier
def test_a_folder_of_ranks_analysed_by_two_workers_gives_what_one_process_gives(tmp_path):
    folder = tmp_path / "ranks"
    folder.mkdir()
    for rank in range(4):
        subprocess.run([sys.executable, str(MAKE_TRACE), str(folder / f"rank{rank}.pt.trace.json.gz"), "--events",
                        "15000", "--steps", "5", "--seed", str(rank), "--rank", str(rank), "--world-size", "4"],
                       capture_output=True, text=True, timeout=120, check=True)
    written = {}
    for jobs in ("1", "2"):
        out = tmp_path / f"jobs{jobs}"
        done = subprocess.run([sys.executable, "-m", "diagnose", "analyze", str(folder), "--out", str(out),
                               "--jobs", jobs], capture_output=True, text=True, timeout=240, cwd=ROOT)
        assert done.returncode == 0, done.stderr
        written[jobs] = json.loads((out / "analysis.json").read_text())
    assert [r["rank"] for r in written["2"]["ranks"]] == [0, 1, 2, 3]
    assert written["2"] == written["1"]


@pytest.mark.full  # starts processes (a whole run, the CLI, a script): the full tier
def test_compare_counts_events_in_a_child_so_its_peaks_are_the_tools_own(tmp_path, generated):
    # Linux hands each child the peak RSS of the process that starts it: a trace parsed by compare.py itself
    # raised every later figure to compare.py's peak (453 MiB was reported for a run of 240 MiB)
    path, counts = generated
    report = tmp_path / "report.json"
    subprocess.run([sys.executable, str(ROOT / "benchmarks" / "compare.py"), str(path),
                    str(ROOT / "tests" / "data" / "traces" / "a100_ddp_rank3_of8.json.gz"), "--tools", "diagnose",
                    "--repeat", "1", "--pause", "0", "--json", str(report)], capture_output=True, text=True,
                   timeout=300, check=True, cwd=ROOT)
    written = json.loads(report.read_text())
    assert [t["events"] for t in written["traces"]] == [counts["events"], 109_123]
    assert written["floor_peak_rss_mib"] < 60  # parsing the 35 MB trace here would take it past 150


@pytest.mark.full  # starts processes (a whole run, the CLI, a script): the full tier
def test_a_grown_trace_repeats_the_real_ones_steps_along_its_timeline(tmp_path):
    # benchmarks/grow_trace.py: each copy's steps, launches and kernels as the original's, later in time
    source = ROOT / "tests" / "data" / "traces" / "h200" / "convnet_fp32.pt.trace.json.gz"
    grown = tmp_path / "grown.json.gz"
    subprocess.run([sys.executable, str(ROOT / "benchmarks" / "grow_trace.py"), str(source), str(grown), "--times",
                    "3"], capture_output=True, text=True, timeout=120, check=True)
    original, copies = load_trace(source), load_trace(grown)
    assert len(copies.kernels) == 3 * len(original.kernels) and len(copies.steps) == 3 * len(original.steps)
    assert len(set(copies.steps.names)) == len(copies.steps)  # ProfilerStep numbers go on
    assert copies.steps.start.min() == original.steps.start.min() and (np.diff(np.sort(copies.steps.start)) > 0).all()
    links = copies.kernels.correlations()
    assert len(set(links[links >= 0].tolist())) == 3 * len(set(original.kernels.correlations().tolist()) - {-1})
    first, later = analyze(Inputs(original)).steps, analyze(Inputs(copies)).steps
    assert [s.duration_s for s in later[:len(first)]] == [s.duration_s for s in first]
