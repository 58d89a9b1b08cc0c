"""A trace with more events than `--max-events` is analysed over a window of its middle steps, in memory bounded
by the budget: those steps get the same figures as the whole trace gives them, on every real trace here. A trace
with too few steps to cut at is cut in time: that span gets the figures the whole trace gives it."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest
from conftest import (
    PEAK_BYTES,
    REPO,
    TRACES,
    diagnose_cli,
    generated_trace,
    main_step_count,
    one_step_and_its_neighbours,
    trace_params,
)

from diagnose.analysis.analyze import Inputs, analyze
from diagnose.trace import load as trace_module
from diagnose.trace import stream
from diagnose.trace.kept_steps import ObjectCounter, StepCounter, choose_kept_steps
from diagnose.trace.load import load_trace
from diagnose.trace.spans import Spans


def _counted(path) -> StepCounter:
    counter = StepCounter()
    for block in stream._decompressed(path):
        counter.feed(block)
    counter.finish()
    return counter


# more steps than one and its two neighbours: a window of steps is then less than the whole trace
STEPPED = [p for p in sorted(TRACES.rglob("*.json.gz")) if main_step_count(_counted(p)) > 3]


@pytest.mark.parametrize("path", trace_params(STEPPED))
def test_a_window_gives_its_steps_the_figures_the_whole_trace_gives_them(path):
    counter = _counted(path)
    budget = one_step_and_its_neighbours(counter)
    windowed = load_trace(path, max_events=budget)
    window = windowed.kept_steps
    assert window is not None and 1 <= window.last - window.first + 1 < window.steps
    whole = analyze(Inputs(load_trace(path, max_events=0))).steps[window.first:window.last + 1]
    mine = analyze(Inputs(windowed))
    assert [s.buckets_s for s in mine.steps] == [s.buckets_s for s in whole]  # (rounded to the microsecond)
    assert [s.duration_s for s in mine.steps] == pytest.approx([s.duration_s for s in whole], abs=1e-9)
    assert mine.notes[0] == window.note() and "were analysed (the middle ones)" in mine.notes[0]


def _spans_held(trace) -> int:
    return sum(len(spans) for spans in vars(trace).values() if isinstance(spans, Spans))


@pytest.mark.parametrize("name", ["a100_alexnet_pageable_h2d.json.gz", "cpu_only_with_dataloader.json.gz",
                                  "generated"])
@pytest.mark.full  # starts processes (a whole run, the CLI, a script): the full tier
def test_a_trace_with_too_few_steps_is_cut_in_time_and_that_span_gets_the_whole_traces_figures(
        name, monkeypatch, tmp_path):
    # small blocks: these traces are a few MB, a trace cut in time many GB (the sampled starts place the span)
    monkeypatch.setattr(stream, "READ_BYTES", 32 << 10)
    monkeypatch.setattr(StepCounter, "OVERLAP", 2 << 10)
    path = generated_trace(tmp_path, 100_000, "--no-markers") if name == "generated" else TRACES / name
    counter = stream.text_counted(path, 1)
    assert not counter.stepped and len(counter.starts) > 20
    budget = counter.events // 4
    windowed = load_trace(path, max_events=budget)
    window = windowed.kept_steps
    assert window.by_time and window.keep_from < window.keep_until and not (window.lead_in or window.lead_out)
    if counter.marks:  # its marker dropped, the marker's thread stays the main one
        assert windowed.main_thread == window.main_thread != ()
    whole = load_trace(path, max_events=0)
    assert _spans_held(windowed) < _spans_held(whole) / 2  # about a quarter, by the sampled starts
    # the reference: every event, the same span of time as the one step
    metadata, spans, memory, flops, _ = stream.stream_rows(path, max_events=0)
    reference = trace_module._assemble(str(path), metadata, {**spans, "step": Spans()}, window)
    reference.memory, reference.flop_ops = memory, flops
    mine, theirs = analyze(Inputs(windowed)), analyze(Inputs(reference))
    assert len(mine.steps) == 1 and [s.buckets_s for s in mine.steps] == [s.buckets_s for s in theirs.steps]
    assert mine.steps[0].duration_s == pytest.approx(theirs.steps[0].duration_s, abs=1e-9)
    assert mine.notes[0] == window.note() and "from the middle of the trace's" in mine.notes[0]
    assert "was analysed as one step" in mine.notes[0] and "to cut it at steps" in mine.notes[0]


@pytest.mark.full  # starts processes (a whole run, the CLI, a script): the full tier
def test_steps_too_big_for_the_budget_are_cut_in_time_so_memory_stays_bounded(monkeypatch, tmp_path):
    # a trace of a few huge steps: a window of one step and its two neighbours would hold three steps' events,
    # whatever the budget; a span of time holds about the budget's
    monkeypatch.setattr(stream, "READ_BYTES", 32 << 10)
    monkeypatch.setattr(StepCounter, "OVERLAP", 2 << 10)
    path = generated_trace(tmp_path, 100_000, "--steps", "5")
    counter = stream.text_counted(path, 1)
    step_events = counter.events // 5
    fits = load_trace(path, max_events=3 * step_events + 100)  # one step and its neighbours fit: cut at steps
    assert not fits.kept_steps.by_time and fits.kept_steps.first == fits.kept_steps.last == 2
    budget = 2 * step_events  # fewer than three steps' events
    windowed = load_trace(path, max_events=budget)
    window = windowed.kept_steps
    assert window.by_time and window.steps == 5 and not (window.lead_in or window.lead_out)
    assert _spans_held(windowed) < 0.8 * _spans_held(fits)  # about two steps' events, not three
    assert windowed.main_thread == window.main_thread != ()  # the markers' thread, its markers dropped
    mine = analyze(Inputs(windowed))
    assert len(mine.steps) == 1 and mine.notes[0] == window.note()
    assert f"its 5 steps of about {counter.events // 5:,} events each" in mine.notes[0]
    assert "a step and the two beside it are more than that" in mine.notes[0]


def test_ranks_cut_in_time_where_one_ranks_steps_are_too_big():
    from diagnose.trace.kept_steps import agreed_kept_steps

    small, big = _counter(range(0, 10), 1000), _counter(range(0, 10), 4000)  # 100 and 400 events a step
    for counter in (small, big):
        counter.starts.extend(float(t) for t in range(0, 1000, 10))
    assert not small.kept_steps(500).by_time and big.kept_steps(500).by_time
    first, second = agreed_kept_steps([small, big], 500)
    assert first.by_time and second.by_time  # the same stretch of training in both
    assert (first.keep_from, first.keep_until) == (second.keep_from, second.keep_until)
    assert "another rank's steps are too big" in first.note()  # (its own steps fit: not said of them)
    assert "its 10 steps of about 400 events each" in second.note()


def test_a_rank_with_too_few_steps_is_cut_in_time_beside_ranks_cut_at_steps():
    from diagnose.trace.kept_steps import agreed_kept_steps

    timed = _counter([], 1000)
    timed.starts.extend(float(t) for t in range(0, 1000, 10))
    stepped, alone = agreed_kept_steps([_counter(range(0, 10), 1000), timed], 500)
    assert stepped.by_time is False and (stepped.first, stepped.last) == (3, 5)
    assert alone.by_time and alone.keep_from == pytest.approx(247.5) and alone.keep_until == pytest.approx(742.5)


def test_the_ranks_of_a_job_cut_in_time_share_one_span():
    from diagnose.trace.kept_steps import agreed_kept_steps

    ranks = [_counter([], events) for events in (1000, 2000, 1000)]
    for counter in ranks[:2]:
        counter.starts.extend(float(t) for t in range(0, 1000, 10))
    ranks[2].starts.extend(float(t) for t in range(5000, 6000, 10))  # another run's trace: no time in common
    alone = [c.kept_steps(500) for c in ranks]
    assert alone[0].keep_until - alone[0].keep_from > alone[1].keep_until - alone[1].keep_from  # half the share
    first, second, other = agreed_kept_steps(ranks, 500)
    assert (first.keep_from, first.keep_until) == (second.keep_from, second.keep_until)
    assert first.keep_until - first.keep_from == pytest.approx(alone[1].keep_until - alone[1].keep_from)
    assert (other.keep_from, other.keep_until) == (alone[2].keep_from, alone[2].keep_until)


def test_the_first_pass_reads_markers_cut_by_block_ends_once(monkeypatch):
    import gzip
    import itertools

    from diagnose.trace.kept_steps import STEP_MARK

    text = gzip.decompress((TRACES / "v100_ddp_rank1_of2.json.gz").read_bytes())
    monkeypatch.setattr(StepCounter, "OVERLAP", 700)  # blocks of 100 to 5000 bytes: short ones and seams
    counter, at = StepCounter(), 0
    for size in itertools.cycle((1700, 100, 5000, 1401, 333)):
        counter.feed(text[at:at + size])
        at += size
        if at >= len(text):
            break
    counter.finish()
    whole = [(pid, tid, float(ts), float(dur), n) for n, pid, tid, ts, dur in STEP_MARK.findall(text)]
    assert counter.marks == whole and len(whole) >= 6
    assert counter.bytes == len(text)


def test_a_marker_cut_anywhere_by_a_block_end_is_read_once(monkeypatch):
    import gzip

    from diagnose.trace.kept_steps import STEP_MARK, STEP_NAME

    text = gzip.decompress((TRACES / "v100_ddp_rank1_of2.json.gz").read_bytes())
    monkeypatch.setattr(StepCounter, "OVERLAP", 700)
    whole = [(pid, tid, float(ts), float(dur), n) for n, pid, tid, ts, dur in STEP_MARK.findall(text)]
    at = text.find(STEP_NAME, 5000)
    for cut in [at + d for d in range(-2, len(STEP_NAME) + 2)] + [at + 700 + d for d in range(-2, len(STEP_NAME) + 2)]:
        counter = StepCounter()  # the cut falls at each byte of a marker's name, at either of a read's limits
        counter.feed(text[:cut])
        counter.feed(text[cut:])
        counter.finish()
        assert counter.marks == whole, cut


def test_a_trace_within_the_budget_is_read_whole():
    path = TRACES / "a100_ddp_rank3_of8.json.gz"
    assert load_trace(path).kept_steps is None and load_trace(path, max_events=10 ** 9).kept_steps is None


MARKS = [(b"1", b"1", float(i * 100), 90.0, str(i).encode()) for i in range(10)]  # ten steps of 100 us, one thread
WINDOW_CASES = [  # (marks, events, budget, expected (first, last, lead_in, lead_out) or None)
    (MARKS, 1000, 0, None),  # 0: no budget
    (MARKS, 1000, 1000, None),  # it fits
    ([], 1000, 10, None),  # no steps to cut the trace at, and no starts sampled to cut it in time: read whole
    (MARKS, 1000, 500, (3, 5, True, True)),  # five steps' events: the middle three and a step on each side
    (MARKS, 1000, 10, (4, 4, True, True)),  # less than a step, and no starts sampled to cut it in time: one step
    (MARKS + [(b"1", b"9", 5.0, 1.0, b"0")] * 3, 1000, 500, (3, 5, True, True)),  # the thread with most markers
]


@pytest.mark.parametrize("marks, events, budget, expected", WINDOW_CASES)
def test_the_window_is_the_middle_steps_that_fit(marks, events, budget, expected):
    window = choose_kept_steps(marks, events, budget, launches=[(b"1", 150.0, 7), (b"1", 950.0, 90)])
    if expected is None:
        assert window is None
        return
    assert (window.first, window.last, window.lead_in, window.lead_out) == expected
    assert window.main_thread == (1, 1)
    assert window.keep_from == 100.0 * (window.first - window.lead_in)
    assert window.keep_until == 100.0 * (window.last + window.lead_out) + 90.0


def test_the_launch_sample_bounds_the_device_work_kept():
    launches = [(b"1", 150.0, 7), (b"1", 250.0, 11), (b"2", 150.0, 5000), (b"1", 750.0, 60), (b"1", 950.0, 90)]
    window = choose_kept_steps(MARKS, 1000, 500, launches)
    assert (window.corr_low, window.corr_high, window.by_launch) == (7, 60, True)  # the main process' own ids
    unsampled = choose_kept_steps(MARKS, 1000, 500, launches[:3])  # none after the window: kept by time instead
    assert not unsampled.by_launch


def test_host_events_are_kept_while_the_device_still_runs_the_window():
    launches = [(b"1", 150.0, 7), (b"1", 750.0, 60)]  # the window: steps 3-5, kept 200-690 us with its lead steps
    lagging = choose_kept_steps(MARKS, 1000, 500, launches, kernels=[(600.0, 30), (1200.0, 61), (980.0, 75)])
    assert (lagging.keep_until, lagging.host_until) == (690.0, 980.0)  # the first work launched after it ran at 980
    unsampled = choose_kept_steps(MARKS, 1000, 500, launches, kernels=[(300.0, 20), (680.0, 55)])
    assert unsampled.host_until == 690.0  # no later work sampled: the lead-out step's end


@pytest.mark.full  # starts processes (a whole run, the CLI, a script): the full tier
def test_the_ranks_of_a_job_are_analysed_over_the_same_steps(tmp_path):
    from diagnose.analysis.sources import analyze_traces
    from diagnose.trace.kept_steps import agreed_kept_steps

    paths = []
    for rank, events in ((0, 60_000), (1, 90_000)):  # ranks of different sizes: alone, different windows
        paths.append(tmp_path / f"rank{rank}.pt.trace.json.gz")
        subprocess.run([sys.executable, str(REPO / "benchmarks" / "make_trace.py"), str(paths[-1]), "--events",
                        str(events), "--rank", str(rank), "--seed", str(rank), "--world-size", "2"],
                       check=True, capture_output=True, timeout=300)
    budget = 25_000
    counters = [stream.text_counted(path, budget) for path in paths]
    alone = [(w.first, w.last) for w in (c.kept_steps(budget) for c in counters)]
    assert alone[0] != alone[1]
    agreed = agreed_kept_steps(counters, budget)
    assert (agreed[0].first, agreed[0].last) == (agreed[1].first, agreed[1].last)
    analysis = analyze_traces(paths, jobs=2, max_events=budget)
    assert f"steps {agreed[0].first + 1}-{agreed[0].last + 1} of 10 were analysed" in analysis.notes[0]
    assert len(analysis.ranks) == 2


@pytest.mark.full  # starts processes (a whole run, the CLI, a script): the full tier
def test_a_rank_in_another_layout_is_analysed_over_the_steps_the_ranks_agreed(tmp_path):
    # rank 1's events have their keys sorted: the text's pass reads nothing of it, its objects are counted instead
    from diagnose.analysis.sources import analyze_traces
    from diagnose.trace.kept_steps import agreed_kept_steps
    from diagnose.trace.trace_file import first_pass

    paths = []
    for rank, events, layout in ((0, 60_000, ()), (1, 90_000, ("--sorted-keys",))):
        paths.append(tmp_path / f"rank{rank}.pt.trace.json.gz")
        subprocess.run([sys.executable, str(REPO / "benchmarks" / "make_trace.py"), str(paths[-1]), "--events",
                        str(events), "--rank", str(rank), "--seed", str(rank), "--world-size", "2", *layout],
                       check=True, capture_output=True, timeout=300)
    budget = 25_000
    counters = [first_pass(path, budget) for path in paths]
    assert counters[0].kineto_layout is True and isinstance(counters[1], ObjectCounter)
    assert len(counters[1].marks) == 10 and counters[1].stepped
    alone = [(w.first, w.last) for w in (c.kept_steps(budget) for c in counters)]
    assert alone[0] != alone[1]
    agreed = agreed_kept_steps(counters, budget)
    assert (agreed[0].first, agreed[0].last) == (agreed[1].first, agreed[1].last)
    assert load_trace(paths[1], max_events=budget, kept_steps=agreed[1]).kept_steps == agreed[1]
    analysis = analyze_traces(paths, jobs=1, max_events=budget)
    steps = agreed[0].last - agreed[0].first + 1
    assert f"steps {agreed[0].first + 1}-{agreed[0].last + 1} of 10 were analysed" in analysis.notes[0]
    assert len(analysis.ranks) == 2 and len(analysis.steps) == steps and all(r.step_time_s > 0 for r in analysis.ranks)


def _counter(numbers, events: int) -> StepCounter:
    counter = StepCounter()
    counter.marks = [(b"1", b"1", float(n * 100), 90.0, str(n).encode()) for n in numbers]
    counter.sampled_events = counter.sampled_bytes = counter.bytes = events
    return counter


def test_ranks_agree_on_step_numbers_not_positions():
    from diagnose.trace.kept_steps import agreed_kept_steps

    early, late = agreed_kept_steps([_counter(range(0, 11), 1100), _counter(range(1, 11), 1000), None], 500)[:2]
    assert (early.first, late.first) == (4, 3)  # one rank recorded a step more, before the others began
    assert (early.keep_from, early.keep_until) == (late.keep_from, late.keep_until)  # ProfilerStep#4-6, both


def test_analyze_with_max_events_says_which_steps_it_analysed(tmp_path):
    out = tmp_path / "out"
    done = diagnose_cli("analyze", str(TRACES / "h200" / "transformer_fp32.pt.trace.json.gz"), "--max-events",
                        "25000", "--out", str(out))  # a step and its two neighbours fit (about 8,000 events each)
    assert done.returncode == 0, done.stderr
    analysis = json.loads((out / "analysis.json").read_text())
    assert analysis["notes"][0].startswith("steps ") and "of 5 were analysed (the middle ones)" in analysis["notes"][0]
    assert 1 <= len(analysis["steps"]) < 5  # (the trace marks its 5 steps on the host and on the GPU)
    assert f"Analysed {len(analysis['steps'])} step(s)" in done.stderr + done.stdout


def test_max_events_must_not_be_negative(tmp_path):
    done = diagnose_cli("analyze", str(TRACES / "a100_ddp_rank3_of8.json.gz"), "--max-events", "-1", "--out",
                        str(tmp_path / "out"))
    assert done.returncode == 2 and "--max-events" in done.stderr and "Traceback" not in done.stderr


def _peak_of_analyze(path, budget: int) -> tuple[int, int]:
    """(peak RSS of a process that loads and analyses the trace, helper included; bytes of the arrays its trace
    holds), the peak the lower of two runs (a process' peak varies by about 10 MiB from run to run here)."""
    measure = ("import sys; from pathlib import Path; from diagnose.trace.load import load_trace; "
               "from diagnose.analysis.analyze import Inputs, analyze; "
               "t = load_trace(Path(sys.argv[1]), max_events=int(sys.argv[2])); analyze(Inputs(t)); "
               "held = sum(a.nbytes for s in vars(t).values() if hasattr(s, 'corr') "
               f"for a in (s.start, s.end, s.name_codes, s.thread_codes_, s.corr)); print({PEAK_BYTES}, held)")
    runs = [subprocess.run([sys.executable, "-c", measure, str(path), str(budget)], capture_output=True, text=True,
                           timeout=600, check=True).stdout.split() for _ in range(2)]
    return min(int(peak) for peak, _ in runs), int(runs[0][1])


@pytest.mark.full  # a whole run, timed by nothing it asserts: the full tier (it runs beside another test)
def test_with_a_budget_memory_does_not_grow_with_the_trace(tmp_path):
    measured = {}
    # steps of the same size: windows of the same size; the last has no markers and is cut in time
    for events, options in ((500_000, ("--steps", "10")), (2_500_000, ("--steps", "50")),
                            (2_500_000, ("--steps", "50", "--no-markers"))):
        path = generated_trace(tmp_path, events, *options)
        measured[path.name] = (_peak_of_analyze(path, 100_000), _peak_of_analyze(path, 0) if len(measured) < 2
                               else (0, 0))
    (((small_peak, small_held), (small_whole, _)), ((big_peak, big_held), (big_whole, _)),
     ((timed_peak, timed_held), _)) = measured.values()
    print(json.dumps({k: [v[0] >> 20 for v in pair] for k, pair in measured.items()}))  # MiB: (window, whole)
    assert abs(big_held - small_held) < small_held / 10  # the spans held: a window's worth, whatever the trace
    assert big_whole - small_whole > 30 << 20  # read whole, five times the events take more memory
    assert big_peak - small_peak < (big_whole - small_whole) / 2  # the window's peak does not follow
    # cut in time: about the budget's events, placed by sampled starts (not a whole number of steps)
    assert abs(timed_held - small_held) < small_held / 3
    assert timed_peak - small_peak < (big_whole - small_whole) / 2


@pytest.mark.parametrize("name", [pytest.param("a100_ddp_rank3_of8.json.gz", marks=pytest.mark.full),
                                  pytest.param("h200/transformer_fp32.pt.trace.json.gz", marks=pytest.mark.full),
                                  "h200/narrow_mlp_foreach_off.pt.trace.json.gz"])
def test_a_trace_in_another_layout_past_the_budget_gets_a_window_chosen_from_its_objects(name, tmp_path,
                                                                                         monkeypatch):
    # its events' keys sorted: the text's first pass cannot read it; a first pass over its parsed objects chooses
    # the window, and the window's steps get the figures the whole trace gives them
    from diagnose.trace import event_pieces
    from diagnose.trace.trace_file import read_events

    original = TRACES / name
    path = tmp_path / "sorted_keys.json"
    path.write_text(json.dumps(read_events(original), sort_keys=True))
    monkeypatch.setattr(event_pieces, "PIECE_BYTES", 256 << 10)
    counter = _counted(original)
    budget = one_step_and_its_neighbours(counter)
    objects = ObjectCounter()
    for events in event_pieces.EventPieces(path):
        objects.feed_events(events)
    assert objects.marks == counter.marks  # the same steps, as the text's pass reads them
    windowed = load_trace(path, max_events=budget)
    window = windowed.kept_steps
    assert window is not None and 1 <= window.last - window.first + 1 < window.steps
    whole = analyze(Inputs(load_trace(original, max_events=0))).steps[window.first:window.last + 1]
    mine = analyze(Inputs(windowed))
    assert [s.buckets_s for s in mine.steps] == [s.buckets_s for s in whole]
    assert [s.duration_s for s in mine.steps] == pytest.approx([s.duration_s for s in whole], abs=1e-9)
    assert "were analysed (the middle ones)" in mine.notes[0]


A100 = TRACES / "a100_ddp_rank3_of8.json.gz"  # 109,123 events in 35 MB of text


@pytest.mark.parametrize("budget, over", [(10 ** 9, False), (300_000, False), (150_000, True), (20_000, True)])
def test_the_first_pass_is_made_only_where_the_texts_head_says_the_budget_may_well_be_passed(budget, over):
    # 300,000: the text could hold that many 100-byte events, but its head's density gives it about 110,000
    assert stream.likely_over(A100, budget) is over


@pytest.mark.parametrize("path", STEPPED[:3], ids=[p.name for p in STEPPED[:3]])
def test_a_trace_that_passes_the_budget_unforeseen_stops_there_and_gets_the_window(path, monkeypatch):
    budget = one_step_and_its_neighbours(_counted(path))
    expected = load_trace(path, max_events=budget)
    monkeypatch.setattr(stream, "likely_over", lambda *_: False)  # its head as sparse as can be
    streamed = []
    monkeypatch.setattr(stream, "_streamed", lambda *args, real=stream._streamed: streamed.append(real(*args))
                        or streamed[-1])
    windowed = load_trace(path, max_events=budget)
    assert streamed[0] == stream.OVER_BUDGET and len(streamed) == 2  # stopped, then read with the window
    assert windowed.kept_steps == expected.kept_steps is not None
    mine, theirs = analyze(Inputs(windowed)), analyze(Inputs(expected))
    assert [s.buckets_s for s in mine.steps] == [s.buckets_s for s in theirs.steps]


def test_a_share_stops_reading_once_past_its_limit():
    share = stream._read_share(A100, 1 << 20, 0, 1, False, None, 20_000)
    assert share == stream.OVER_BUDGET
    whole = stream._read_share(A100, 1 << 20, 0, 1, False, None, 200_000)
    complete = sum(block.count(b'"ph": "X"') for block in stream._decompressed(A100))
    assert whole.events == complete - 1  # the profiler's own span not counted
