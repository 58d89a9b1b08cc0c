"""`diagnose compare`'s op table (each op's and kernel's time per step) read as a stream: the table the whole text
gives, on every trace in tests/data, with pieces small enough that events straddle many of them; a trace past the
budget gives the table of the window of steps its analysis keeps; and memory stays bounded on a big trace."""
from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace

import pytest
from conftest import PEAK_BYTES, TRACES, main_step_count, one_step_and_its_neighbours, trace_params

import diagnose.trace.op_columns as columns_module
from diagnose.compare.optable import profile_of, trace_profile
from diagnose.trace import stream, trace_file
from diagnose.trace.kept_steps import StepCounter
from diagnose.trace.op_columns import whole_text_columns
from diagnose.trace.trace_file import read_events

ALL = sorted(p for p in TRACES.rglob("*.json*") if p.is_file() and p.name != "truth.json")
# more steps than a window of one and its two neighbours
STEPPED = [p for p in ALL if (c := stream.text_counted(p, 1)) is not None and main_step_count(c) > 3]
FEW_STEPS = ["a100_alexnet_pageable_h2d.json.gz", "cpu_only_with_dataloader.json.gz"]  # none and one marker


@pytest.mark.parametrize("path", trace_params(ALL))
def test_the_streamed_op_table_is_the_one_the_whole_text_gives(path, monkeypatch):
    monkeypatch.setattr(stream, "READ_BYTES", 4096)  # inflated a few KB at a time
    assert columns_module._streamed(path, 16 << 10, None) is not None  # read in pieces, not by the fallback
    profile = trace_profile(path, 3, piece_bytes=16 << 10)
    assert profile == profile_of(whole_text_columns(path), 3)
    assert profile.steps >= 1 and (profile.ops or "gloo" in path.name)  # the gloo trace holds no cpu_op


@pytest.mark.parametrize("path", trace_params(STEPPED))
def test_a_trace_past_the_budget_gets_the_op_table_of_its_window_of_steps(path):
    counter = stream.text_counted(path, 1)
    budget = one_step_and_its_neighbours(counter)
    window = trace_file.kept_steps_of(path, budget)
    assert window is not None and not window.by_time
    profile = trace_profile(path, 1, max_events=budget, piece_bytes=64 << 10)
    whole = whole_text_columns(path)
    steps_in_trace = len(whole.marks)
    whole.marks = [(s, d) for s, d in whole.marks if window.keep_from <= s < window.keep_until]
    # the window's steps and its lead-in and lead-out, as the whole text has them
    assert profile == profile_of(whole, 1)
    assert profile.steps == window.last - window.first + 1 + window.lead_in + window.lead_out <= steps_in_trace


@pytest.mark.parametrize("name", FEW_STEPS)
def test_a_trace_with_too_few_steps_past_the_budget_gets_the_op_table_of_its_span_of_time(name, monkeypatch):
    # small blocks: these traces are a few MB, a trace cut in time many GB (the sampled starts place the span)
    monkeypatch.setattr(stream, "READ_BYTES", 32 << 10)
    monkeypatch.setattr(StepCounter, "OVERLAP", 2 << 10)
    path = TRACES / name
    budget = stream.text_counted(path, 1).events // 4
    window = trace_file.kept_steps_of(path, budget)
    assert window is not None and window.by_time
    profile = trace_profile(path, 1, max_events=budget, piece_bytes=64 << 10)
    whole = trace_profile(path, 1, max_events=0)
    assert profile.steps == whole.steps == 1  # the span is the one step its analysis has
    assert set(profile.ops) <= set(whole.ops) and set(profile.kernels) <= set(whole.kernels)
    kept, every = (sum(a.calls for a in p.ops.values()) for p in (profile, whole))
    assert 0 < kept < every / 2  # the middle quarter of the events, as its analysis keeps them


def test_a_trace_in_another_layout_gets_the_same_op_table(tmp_path):
    """Pretty-printed (one key a line), its keys sorted (the args before "ph") or a bare list of events (valid
    Chrome-trace JSON, no traceEvents key): each is read in pieces, to the same table."""
    trace = TRACES / "h200" / "convnet_fp32.pt.trace.json.gz"
    data = read_events(trace)
    expected = trace_profile(trace, 5)
    layouts = {"pretty": json.dumps(data, indent=0), "sorted_keys": json.dumps(data, sort_keys=True),
               "bare_list": json.dumps(data["traceEvents"])}
    for name, text in layouts.items():
        path = tmp_path / f"{name}.json"
        path.write_text(text)
        assert columns_module._streamed(path, 16 << 10, None) is not None, name
        keys_kept = expected if name != "bare_list" else replace(expected, device="", world_size=None)
        assert trace_profile(path, 5, piece_bytes=16 << 10) == keys_kept, name


@pytest.mark.full  # a whole run, timed by nothing it asserts: the full tier (it runs beside another test)
def test_the_op_table_of_a_two_million_event_trace_is_read_in_bounded_memory(two_million_event_trace):
    measure = ("import sys; from pathlib import Path; from diagnose.compare.optable import trace_profile; "
               f"p = trace_profile(Path(sys.argv[1]), 10); print(p.steps, len(p.kernels), {PEAK_BYTES})")
    done = subprocess.run([sys.executable, "-c", measure, str(two_million_event_trace)], capture_output=True,
                          text=True, timeout=600, check=True)
    steps, kernels, peak = map(int, done.stdout.split())
    # read whole as parsed JSON, this table took 2.2 GB on a 1M-event trace (diagnose compare, 9 s)
    assert steps == 10 and kernels > 0 and peak < 512 << 20, (steps, kernels, peak >> 20)
    print(json.dumps({"peak_rss_mib": peak >> 20}))


def test_a_child_that_outlives_its_parent_takes_from_it_only_the_part_inside_it_in_analyze_and_compare(tmp_path):
    """One self-time rule for analyze's op table and compare's: aten::parent runs 10-50 us, aten::child 30-70 us on
    the same thread (seen in traces where an op's end is recorded after its caller's). The parent's self time is
    the 20 us no child covers; the child keeps its 40 us. (compare once subtracted the child's whole 40 us: 0.)"""
    from diagnose.analysis.analyze import Inputs, analyze
    from diagnose.trace.load import load_trace

    def op(name, ts, dur, cat="cpu_op"):
        return {"ph": "X", "cat": cat, "name": name, "pid": 7, "tid": 7, "ts": ts, "dur": dur, "args": {}}

    events = [op("ProfilerStep#1", 0, 100, "user_annotation"), op("aten::parent", 10, 40), op("aten::child", 30, 40),
              op("ProfilerStep#2", 100, 100, "user_annotation"), op("aten::other", 110, 10)]
    path = tmp_path / "outliving.pt.trace.json"
    path.write_text(json.dumps({"schemaVersion": 1, "traceEvents": events}))
    analysed = {o.name: o.self_s for o in analyze(Inputs(load_trace(path))).top_ops}
    compared = {name: amount.seconds * 2 for (name, _), amount in trace_profile(path, 2).ops.items()}  # per step
    assert analysed["aten::parent"] == pytest.approx(20e-6) == compared["aten::parent"]
    assert analysed["aten::child"] == pytest.approx(40e-6) == compared["aten::child"]
