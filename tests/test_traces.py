"""Analysis on real traces recorded on GPUs (tests/data/traces) and on our own CPU runs."""
from __future__ import annotations

import numpy as np
import pytest
from conftest import TRACES

import diagnose.trace.intervals as iv
from diagnose import rules as rule_engine
from diagnose.analysis.analyze import Inputs, analyze
from diagnose.errors import UserError
from diagnose.optimizations import REGISTRY
from diagnose.tbcompat import tensorboard_overview
from diagnose.trace.load import load_trace

ALL_TRACES = sorted(p.name for p in TRACES.glob("*.json.gz")) + ["two_ranks/rank-0.json.gz", "two_ranks/rank-1.json.gz"]
RULES = rule_engine.load_rules(optimization_ids=REGISTRY)


def _diagnose(name: str):
    analysis = analyze(Inputs(load_trace(TRACES / name)))
    return analysis, rule_engine.evaluate(RULES, analysis)


@pytest.mark.parametrize("name", ALL_TRACES)
def test_every_bundled_trace_is_analysed_into_buckets_that_sum_to_one(name):
    analysis, _ = _diagnose(name)
    assert analysis.steps
    assert abs(sum(analysis.breakdown.values()) - 1.0) < 1e-6
    assert all(v >= 0 for v in analysis.breakdown.values())
    for step in analysis.steps:
        assert sum(step.buckets_s.values()) <= step.duration_s * (1 + 1e-9) + 1e-9


def test_kernel_heavy_v100_trace_is_compute_bound_with_no_idle_gpu_finding():
    analysis, findings = _diagnose("v100_single_rank_kernel_heavy.json.gz")
    assert analysis.breakdown["compute"] > 0.9
    assert analysis.metrics["gpu_busy_frac"] > 0.9  # torch-tb-profiler: kernel 97%
    assert not [f for f in findings if f.category == "utilization" and f.rule != "utilization.tensor-cores-unused"]


def test_host_sync_trace_has_low_gpu_busy_and_a_utilization_finding():
    analysis, findings = _diagnose("a100_rank0_of16_host_syncs.json.gz")
    assert analysis.metrics["gpu_busy_frac"] < 0.5  # torch-tb-profiler: kernel 32%
    assert analysis.metrics["syncs_per_step"] >= 10
    assert "utilization.gpu-underused" in {f.rule for f in findings}


def test_ddp_trace_shows_communication_and_pinned_copies():
    analysis, _ = _diagnose("a100_ddp_rank3_of8.json.gz")
    assert analysis.metrics["communication_frac"] > 0.05
    assert analysis.metrics["h2d_pageable_frac"] is not None and analysis.metrics["h2d_pageable_frac"] < 0.5
    assert len(analysis.steps) == 6


def test_trace_without_profiler_steps_falls_back_to_one_step_and_says_so():
    analysis, _ = _diagnose("a100_alexnet_pageable_h2d.json.gz")
    assert len(analysis.steps) == 1
    assert any("no ProfilerStep" in note for note in analysis.notes)
    assert analysis.metrics["h2d_pageable_frac"] == pytest.approx(1.0)


def test_not_a_trace_is_a_clear_error(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text('{"hello": 1}')
    with pytest.raises(UserError, match="not a Chrome trace"):
        load_trace(bad)
    (tmp_path / "broken.json").write_text("{")
    with pytest.raises(UserError, match="cannot read trace"):
        load_trace(tmp_path / "broken.json")


def test_tensorboard_overview_agrees_with_our_data_wait(sample_run):
    run = sample_run("slow_loader.py")
    overview = tensorboard_overview(run.run_dir / "tb")
    ours = run.diagnosis["breakdown"]["data_wait"]
    assert abs(overview["DataLoader"] - ours) <= 0.10, (overview, ours)


def _brute(intervals: np.ndarray, grid: np.ndarray) -> np.ndarray:
    return np.array([any(a <= t < b for a, b in intervals) for t in grid])


def test_interval_arithmetic_matches_brute_force_on_random_sets():
    rng = np.random.default_rng(0)
    grid = np.arange(0, 100, 0.25) + 0.125
    for _ in range(200):
        a = np.sort(rng.integers(0, 100, size=(rng.integers(0, 8), 2)), axis=1).astype(float)
        b = np.sort(rng.integers(0, 100, size=(rng.integers(0, 8), 2)), axis=1).astype(float)
        ua, ub = iv.union(a), iv.union(b)
        in_a, in_b = _brute(a, grid), _brute(b, grid)
        assert (_brute(ua, grid) == in_a).all()
        assert (_brute(iv.intersect(ua, ub), grid) == (in_a & in_b)).all()
        assert (_brute(iv.subtract(ua, ub), grid) == (in_a & ~in_b)).all()
        assert iv.total(ua) == pytest.approx(in_a.sum() * 0.25)
        window = np.array([[10.0, 60.0]])
        assert iv.measure_within(ua, window)[0] == pytest.approx(iv.total(iv.intersect(ua, window)))
        assert (iv.contains(ua, grid) == in_a).all()


def test_spans_pieces_joined_and_subsets_keep_each_name_and_thread():
    # a big trace's pieces each code their names and threads in their own tables; joined, one table holds each once
    from diagnose.trace.spans import Spans

    first = Spans.of([(0, 1, "aten::mm", (1, 1), 4), (1, 1, "aten::add", (1, 2), -1)])
    second = Spans.of([(2, 1, "aten::add", (1, 1)), (3, 1, "aten::relu", (1, 2))])
    joined = Spans.concat([first, second])
    assert joined.names == ["aten::mm", "aten::add", "aten::add", "aten::relu"]
    assert joined.tids == [(1, 1), (1, 2), (1, 1), (1, 2)]
    assert sorted(joined.name_table) == ["aten::add", "aten::mm", "aten::relu"] and len(joined.thread_table) == 2
    assert joined.correlations().tolist() == [4, -1, -1, -1]
    on_one = joined.where_thread(lambda t: t == (1, 1))
    assert (on_one.names, on_one.start.tolist(), on_one.threads_present()) == (["aten::mm", "aten::add"], [0, 2],
                                                                              [(1, 1)])
    assert on_one.mask(lambda n: n == "aten::add").tolist() == [False, True]
    # a big trace's pieces are gathered: the same join, each piece emptied once copied (its memory given back)
    host_ops = Spans(np.array([4.0]), np.array([5.0]), np.zeros(1, dtype=np.int32), ["aten::mm"],
                     np.zeros(1, dtype=np.int32), [(1, 3)])
    expected = Spans.concat([first, second, host_ops])
    assert len(host_ops.corr) == 0  # concat left its parts as they were
    pieces = [Spans.concat([first]), Spans.concat([second]), host_ops]
    gathered = Spans.gathered(pieces)
    assert (gathered.names, gathered.tids) == (expected.names, expected.tids)
    assert gathered.start.tolist() == expected.start.tolist() and gathered.end.tolist() == expected.end.tolist()
    assert gathered.correlations().tolist() == [4, -1, -1, -1, -1]
    assert all(len(piece.start) == len(piece.name_codes) == len(piece.corr) == 0 for piece in pieces)


def test_a_thread_written_as_a_list_is_read_not_a_traceback(tmp_path):
    # no profiler writes one, but the full parser reads any JSON: such a thread keys its table by its JSON text
    import json

    events = [{"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 1, "tid": 1, "ts": 0, "dur": 100},
              {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 10, "dur": 50},
              {"ph": "X", "cat": "kernel", "name": "gemm", "pid": 0, "tid": [7], "ts": 20, "dur": 30}]
    path = tmp_path / "odd.json"
    path.write_text(json.dumps({"traceEvents": events}))
    trace = load_trace(path)
    assert trace.kernels.tids == [(0, "[7]")] and len(analyze(Inputs(trace)).steps) == 1


@pytest.mark.parametrize("name", ["h200/narrow_mlp_foreach_off.pt.trace.json.gz", "v100_ddp_rank1_of2.json.gz"])
def test_a_trace_read_in_small_chunks_by_two_processes_reads_as_in_one(name, monkeypatch):
    # the spans, memory events and FLOP ops are read chunk by chunk, half the chunks by a forked process: the
    # pieces joined again are what one chunk gives, event for event
    from diagnose.trace import fastparse

    def read(chunk_bytes: int, cores: int):
        monkeypatch.setattr(fastparse, "CHUNK_BYTES", chunk_bytes)
        monkeypatch.setattr(fastparse, "MIN_CHUNK_BYTES", min(chunk_bytes, 16 << 10))
        monkeypatch.setattr(fastparse, "HELPER_OVER_BYTES", 0)  # (these traces are a few MB: a helper anyway)
        monkeypatch.setattr(fastparse, "usable_cores", lambda: cores)
        return load_trace(TRACES / name, stream=False)

    whole, chunked = read(1 << 30, 1), read(64 << 10, 2)
    _assert_same_trace(whole, chunked, name)


def test_pieces_a_helper_claimed_and_never_returned_are_read_by_the_parent(monkeypatch):
    # the helper claims pieces from the end, then dies (killed, out of memory): what it claimed is read here
    from diagnose.trace import fastparse

    name = "v100_ddp_rank1_of2.json.gz"
    whole = load_trace(TRACES / name, stream=False)

    def dying_helper(work):
        reading = dying_helper.reading
        for _ in range(3):
            dying_helper.claimed.append(reading.claims.claim(from_end=True))
        return lambda: None  # as _forked's result is for a child that failed

    dying_helper.claimed = []

    original = fastparse._Reading.__init__

    def init(self, *args):
        dying_helper.reading = self
        original(self, *args)

    monkeypatch.setattr(fastparse, "CHUNK_BYTES", 64 << 10)
    monkeypatch.setattr(fastparse, "HELPER_OVER_BYTES", 0)
    monkeypatch.setattr(fastparse, "usable_cores", lambda: 2)
    monkeypatch.setattr(fastparse, "_forked", dying_helper)
    monkeypatch.setattr(fastparse._Reading, "__init__", init)
    _assert_same_trace(whole, load_trace(TRACES / name, stream=False), name)
    assert len(dying_helper.claimed) == 3 and all(dying_helper.claimed)


def _assert_same_trace(whole, chunked, name: str) -> None:
    for kind in ("steps", "dataloader", "cpu_ops", "annotations", "kernels", "memcpy", "memset", "runtime", "python"):
        a, b = getattr(whole, kind), getattr(chunked, kind)
        assert a.names == b.names and a.tids == b.tids, kind
        assert np.array_equal(a.start, b.start) and np.array_equal(a.end, b.end), kind
        assert np.array_equal(a.correlations(), b.correlations()), kind
    assert len(whole.memory) == len(chunked.memory) and (len(whole.memory) > 0) == ("h200" in name)
    for column in ("ts", "allocated", "reserved", "nbytes", "device_type"):
        assert np.array_equal(getattr(whole.memory, column), getattr(chunked.memory, column)), column
    assert whole.memory.tids == chunked.memory.tids
    assert len(whole.flop_ops) == len(chunked.flop_ops) > 0
    assert np.array_equal(whole.flop_ops.ts, chunked.flop_ops.ts)
    assert [k.key for k in whole.flop_ops.kinds] == [k.key for k in chunked.flop_ops.kinds]
    assert np.array_equal(whole.flop_ops.kind_codes, chunked.flop_ops.kind_codes)


def test_a_complete_event_without_a_start_is_on_no_timeline(tmp_path):
    # a hand-written or truncated event with no "ts": every reader skips it (none places it at time 0)
    import json

    events = [{"ph": "X", "cat": "cpu_op", "name": "aten::add", "pid": 1, "tid": 1, "dur": 50},
              {"ph": "X", "cat": "cpu_op", "name": "aten::mul", "pid": 1, "tid": 1, "ts": 120, "dur": 10}]
    path = tmp_path / "no_start.json"
    path.write_text(json.dumps({"traceEvents": events}))
    ops = load_trace(path).cpu_ops
    assert ops.names == ["aten::mul"] and ops.start.tolist() == [120.0]
