"""The compiled scanner of big traces reads exactly what fastparse's expression reads: the same spans (start, end,
name, thread, correlation id), the same events left unmatched, on every trace in tests/data and on events written
to test each turn of the grammar."""
from __future__ import annotations

import gzip
import subprocess
import sys

import numpy as np
import pytest
from conftest import REPO, TRACES, trace_params

from diagnose.trace import fastparse, jitscan, stream
from diagnose.trace.spans import Spans

pytestmark = pytest.mark.skipif(not jitscan.usable(), reason="numba is not installed here")

ALL = sorted(p for p in TRACES.rglob("*.json*") if p.is_file() and p.name != "truth.json")


def read(text: bytes, jit: bool, chunk: int = 0):
    chunks = [(0, len(text))] if not chunk else [(a, min(a + chunk, len(text))) for a in range(0, len(text), chunk)]
    return fastparse._read_chunks(text, chunks, jit)


def assert_same(mine, theirs):
    (parts, matched, complete), (their_parts, their_matched, their_complete) = mine, theirs
    assert (matched, complete) == (their_matched, their_complete)
    for kind in parts:
        a, b = Spans.concat(parts[kind]), Spans.concat(their_parts[kind])
        assert a.names == b.names and a.tids == b.tids, kind
        assert np.array_equal(a.start, b.start) and np.array_equal(a.end, b.end), kind
        assert np.array_equal(a.correlations(), b.correlations()), kind


@pytest.mark.parametrize("path", trace_params(ALL))
def test_every_test_trace_is_read_as_the_expression_reads_it(path):
    text = gzip.decompress(path.read_bytes())
    scanned, matched = read(text, jit=True), read(text, jit=False)
    assert scanned[1] > 0 or "gloo" in path.name or "rocm" in path.name
    assert_same(scanned, matched)


def event(head: str, tail: str = "") -> str:
    return '{"ph": "X", ' + head + tail + "}"


# each: one event's text after '"ph": "X", ' -- what it tests
CASES = {
    "plain": '"cat": "kernel", "name": "k", "pid": 1, "tid": 7,\n "ts": 10.5, "dur": 2, "args": {"correlation": 5}',
    "escaped quote and unicode in the name":
        '"cat": "cpu_op", "name": "a\\"b\\u00e9\\\\", "pid": 1, "tid": 1, "ts": 1, "dur": 1',
    "string pid and tid": '"cat": "kernel", "name": "k", "pid": "Spans", "tid": "stream 7", "ts": 1, "dur": 1',
    "negative and exponent numbers": '"cat": "cpu_op", "name": "n", "pid": -3, "tid": 2, "ts": -1.5e3, "dur": 2.E+1',
    "number with a bare dot": '"cat": "cpu_op", "name": "n", "pid": 3, "tid": 2, "ts": 15., "dur": 0',
    "correlation after a list": '"cat": "kernel", "name": "k", "pid": 1, "tid": 1, "ts": 1, "dur": 1, '
                                '"args": {"grid": [1, 1], "correlation": 9}',
    "correlation as a string, then a number": '"cat": "kernel", "name": "k", "pid": 1, "tid": 1, "ts": 1, "dur": 1, '
                                              '"args": {"correlation": "x", "correlation": 4}',
    "correlation after strings and scalars": '"cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, '
                                             '"ts": 1, "dur": 1, "args": {"External id": 3, "a": "b, c", '
                                             '"f": 1.5e-3 , "correlation": 11}',
    "args not right after dur": '"cat": "kernel", "name": "k", "pid": 1, "tid": 1, "ts": 1, "dur": 1, "bp": "e", '
                                '"args": {"correlation": 2}',
    "compact": '"cat":"kernel","name":"k","pid":1,"tid":1,"ts":3,"dur":1,"args":{"correlation":8}',
    "other key order (the profiler's own span)": '"cat": "Trace", "ts": 1, "dur": 5, "pid": "Spans", "tid": 1, '
                                                 '"name": "PyTorch Profiler (0)"',
    "backslash in the category": '"cat": "a\\\\b", "name": "k", "pid": 1, "tid": 1, "ts": 1, "dur": 1',
    "a float pid": '"cat": "cpu_op", "name": "k", "pid": 1.5, "tid": 1, "ts": 1, "dur": 1',
    "no dur": '"cat": "cpu_op", "name": "k", "pid": 1, "tid": 1, "ts": 1',
    "a correlation id past int64": '"cat": "kernel", "name": "k", "pid": 1, "tid": 1, "ts": 1, "dur": 1, '
                                   '"args": {"correlation": 99999999999999999999}',
    "tabs and newlines between keys": '"cat":\t"cpu_op",\n\t"name":  "k" ,"pid": 1, "tid": 1, "ts": 1, "dur": 1',
    "a host op with a correlation id": '"cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 1, "dur": 1, '
                                       '"args": {"correlation": 6}',
    "a host category as a prefix of another": '"cat": "cpu_op_x", "name": "k", "pid": 1, "tid": 1, "ts": 1, '
                                              '"dur": 1, "args": {"correlation": 6}',
    "torch 2.13's comma on a line of its own": '"cat": "kernel",\n    "name": "k",\n    "pid": 1,\n    "tid": 7,\n'
                                                '    "ts": 1.5,\n    "dur": 2.25\n    ,\n    "args": {\n'
                                                '      "External id": 3,"device": 0 , "stream": "7"\n ,'
                                                ' "correlation": 12\n    }',
    "space before every comma": '"cat": "kernel" , "name": "k" ,"pid": 1 ,"tid": 1 ,"ts": 1 ,"dur": 1 ,'
                                '"args": {"correlation": 4}',
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_each_turn_of_the_grammar_is_read_as_the_expression_reads_it(case):
    plain = event(CASES["plain"])
    text = ('{"traceEvents": [\n' + ",\n".join([plain, event(CASES[case]), plain]) + "\n]}").encode()
    assert_same(read(text, jit=True), read(text, jit=False))


def test_host_ops_link_nothing_whatever_their_args_say_and_device_work_keeps_its_link():
    # the expression does not search a host category's args for a correlation id; the scanner reads one and the
    # host kinds' spans drop it: both readers give host ops no links and a launch and its kernel theirs
    host = event(CASES["a host op with a correlation id"])
    launch = event('"cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": 2, "dur": 1',
                   ', "args": {"correlation": 5}')
    text = ('{"traceEvents": [\n' + ",\n".join([host, launch, event(CASES["plain"])]) + "\n]}").encode()
    for jit in (True, False):
        parts, matched, complete = read(text, jit)
        assert matched == complete == 3
        assert list(Spans.concat(parts["cpu"]).correlations()) == [-1]
        assert list(Spans.concat(parts["runtime"]).correlations()) == [5]
        assert list(Spans.concat(parts["kernel"]).correlations()) == [5]


NUMBERS = ["1" * 40, "0.1", "5628317421947.704", "9007199254740993", "9007199254740992", "1.5e300",
           "4.9e-324", "123456789012345678901234567890e-25", "-0", "-0.0", "1e22", "1e23", "2.5E-22", "3e-23", "15.",
           "1700000000895278.125", "0.30000000000000004", "7.0e+1"]


def test_numbers_the_kernel_reads_are_those_python_reads():
    # where one exact IEEE operation gives the value, the kernel computes it; else numpy parses the text: both
    # as Python's float() does, to the bit (and a sign of zero)
    events = [event(f'"cat": "cpu_op", "name": "k", "pid": 1, "tid": 1, "ts": {n}, "dur": {n}') for n in NUMBERS]
    text = ('{"traceEvents": [' + ",".join(events) + "]}").encode()
    scanned = jitscan.scan(text, 0, len(text))
    expected = np.array([float(n) for n in NUMBERS])
    assert scanned.begin.tobytes() == scanned.duration.tobytes() == expected.tobytes()
    assert_same(read(text, jit=True), read(text, jit=False))


def test_both_readers_count_complete_events_whatever_their_spacing():
    # two layouts in one text (not Kineto's writer, but JSON): each reader counts every '"ph": "X"' it passes, in
    # any spacing, and reads them all
    compact = '{"ph":"X","cat":"kernel","name":"k","pid":1,"tid":7,"ts":3,"dur":1}'
    text = ('{"traceEvents": [' + ",".join([event(CASES["plain"]), compact, event(CASES["plain"])]) + "]}").encode()
    assert read(text, jit=True)[1:] == (3, 3)
    assert_same(read(text, jit=True), read(text, jit=False))
    # an event in another key order (not the profiler's own span) is counted and not read: the full parser
    other_order = event('"cat": "cpu_op", "ts": 1, "dur": 1, "name": "lost", "pid": 1, "tid": 1')
    text = ('{"traceEvents": [' + ",".join([compact, other_order]) + "]}").encode()
    assert read(text, jit=True)[1:] == read(text, jit=False)[1:] == (1, 2)


def test_a_chunk_left_to_the_expression_in_a_text_of_both_layouts_goes_to_the_full_parser():
    # the scanner gives up on the chunk (a 42-byte ts); the expression counts one spacing and matches both, so a
    # pretty event it cannot match (keys in another order) would cancel the compact one it can: not a match
    long_ts = '{"ph":"X","cat":"kernel","name":"k","pid":1,"tid":7,"ts":1.' + "0" * 40 + ',"dur":1}'
    other_order = event('"cat": "cpu_op", "ts": 1, "dur": 1, "name": "lost", "pid": 1, "tid": 1')
    text = ('{"traceEvents": [' + ",".join([event(CASES["plain"]), long_ts, other_order]) + "]}").encode()
    _, matched, complete = read(text, jit=True)
    assert matched != complete


def test_chunks_of_any_size_read_the_same(monkeypatch):
    text = gzip.decompress((TRACES / "a100_nccl_rank0_of2.json.gz").read_bytes())
    whole = read(text, jit=False)
    for chunk in (4096, 65536):
        bounds = fastparse._chunks  # cut where an event begins, as the readers cut
        monkeypatch.setattr(fastparse, "CHUNK_BYTES", chunk)
        assert_same(fastparse._read_chunks(text, bounds(text, 0), True), whole)


def test_the_stream_reads_with_the_scanner_and_without_it_alike(monkeypatch):
    path = TRACES / "v100_ddp_rank1_of2.json.gz"
    monkeypatch.setattr(stream, "PIECE_BYTES", 256 << 10)
    scanned = stream.stream_rows(path)
    monkeypatch.setenv("DIAGNOSE_NO_JIT", "1")
    matched = stream.stream_rows(path)
    assert scanned is not None and matched is not None
    for kind, spans in matched[1].items():
        mine = scanned[1][kind]
        assert mine.names == spans.names and mine.tids == spans.tids, kind
        assert np.array_equal(mine.start, spans.start) and np.array_equal(mine.correlations(), spans.correlations())


@pytest.mark.full  # starts processes (a whole run, the CLI, a script): the full tier
def test_a_trace_read_whole_does_not_pay_for_importing_numba():
    # numba's import and cached code cost about 0.6 s: only a trace big enough to stream pays it back
    trace = TRACES / "a100_ddp_rank3_of8.json.gz"
    code = ("import sys; from pathlib import Path; from diagnose.trace.load import load_trace; "
            f"load_trace(Path({str(trace)!r})); print('numba' in sys.modules)")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=120)
    assert result.stdout.strip() == "False", result.stderr


def test_a_correlation_id_past_int64_or_below_zero_links_nothing_in_any_reader(tmp_path):
    import json

    from diagnose.trace.classify import correlation_id
    from diagnose.trace.trace_file import parsed_whole

    ids = ["99999999999999999999", "-5", "7"]
    events = [event('"cat": "kernel", "name": "k", "pid": 1, "tid": 1, "ts": 1, "dur": 1, '
                    f'"args": {{"correlation": {i}}}') for i in ids]
    text = ('{"traceEvents": [' + ",".join(events) + "]}").encode()
    fast, scanned = (Spans.concat(read(text, jit=jit)[0]["kernel"]).correlations().tolist() for jit in (False, True))
    full = parsed_whole(tmp_path / "t.json", text).spans["kernel"].correlations().tolist()
    parsed = [correlation_id(e) for e in json.loads(text)["traceEvents"]]  # (the op table's and window's reader)
    assert fast == scanned == full == parsed == [-1, -1, 7]


def test_events_smaller_than_the_scanner_expects_grow_its_rows():
    # rows are sized for Kineto's 300-byte events; 2000 compact 80-byte ones run them out and are scanned again
    tiny = event('"cat":"cpu_op","name":"k","pid":1,"tid":1,"ts":5,"dur":1').replace('"ph": "X", ', '"ph":"X",')
    text = ('{"traceEvents": [' + ",".join([tiny] * 2000) + "]}").encode()
    scanned = jitscan.scan(text, 0, len(text))
    assert scanned is not None and len(scanned.ints) == 2000
    assert_same(read(text, jit=True), read(text, jit=False))


WITH_OPS = [p for p in ALL if "gloo" not in p.name and "rocm" not in p.name]


@pytest.mark.parametrize("path", trace_params(WITH_OPS))
def test_self_times_walked_by_numba_equal_the_python_walk(path, monkeypatch):
    from diagnose.analysis.breakdown import compute_threads
    from diagnose.trace.load import load_trace
    from diagnose.trace.self_time_rule import self_times

    trace = load_trace(path, stream=False)
    threads = compute_threads(trace)
    compiled = self_times(trace.cpu_ops, threads)
    monkeypatch.setattr(jitscan, "loaded", lambda: None)
    plain = self_times(trace.cpu_ops, threads)
    assert np.array_equal(compiled[0], plain[0]) and np.array_equal(compiled[1], plain[1])
    assert compiled[1].any() or not len(trace.cpu_ops)
    # the analysis calls the walk with the types the sample check compiled: no second compilation (seconds)
    assert len(jitscan._kernels().walk_nesting.signatures) == 1


def test_self_times_of_nested_overlapping_ops_on_two_threads(monkeypatch):
    from diagnose.trace.self_time_rule import self_times

    # thread a: a parent [0, 10) holding [1, 4) (itself holding [2, 3)) and [5, 12) (running past its end);
    # thread b: [0, 5) and, starting with it, [0, 2): the longer one is the parent
    ops = Spans.of([(0, 10, "p", "a"), (1, 3, "c", "a"), (2, 1, "g", "a"), (5, 7, "late", "a"),
                    (0, 5, "q", "b"), (0, 2, "d", "b")])
    expected = ([10 - 3 - 5, 3 - 1, 1, 7, 5 - 2, 2], [True, False, False, False, False, False])
    for loaded in (jitscan.loaded, lambda: None):
        monkeypatch.setattr(jitscan, "loaded", loaded)
        self_t, top = self_times(ops, {"a"})
        assert (self_t.tolist(), top.tolist()) == expected


def _walked(order, codes, starts, ends, counted):
    from diagnose.trace.nesting import walk_nesting

    n = len(order)
    self_t, top = (ends - starts).tolist(), [False] * n
    walk_nesting(order.tolist(), codes.tolist(), starts.tolist(), ends.tolist(), counted.tolist(), [0] * n, self_t,
                 top)
    return np.maximum(np.asarray(self_t), 0.0), np.asarray(top, dtype=bool)


def _nested_ops(rng, start: float, end: float, depth: int, out: list) -> None:
    """Ops that nest or are apart, as a profiler's do: children inside their parent, some empty, some sharing
    their parent's start or end."""
    at = start
    while at < end and depth < 4:
        length = float(rng.choice([0.0, rng.integers(1, 6)]))
        child_end = min(at + length, end)
        out.append((at, child_end))
        _nested_ops(rng, at, child_end, depth + 1, out)
        at = child_end + float(rng.integers(0, 3))


def test_nested_ops_get_the_walks_self_times_from_array_operations():
    from diagnose.trace.self_time_rule import nested_self_times

    rng = np.random.default_rng(11)
    nested = walked = 0
    for case in range(300):
        rows = []
        for thread in range(int(rng.integers(1, 4))):
            ops: list = []
            _nested_ops(rng, 0.0, float(rng.integers(5, 40)), 0, ops)
            rows += [(s, e, thread) for s, e in ops]
        if case % 3 == 0 and len(rows) > 1:  # one op stretched past its parent's end: they no longer nest
            i = int(rng.integers(0, len(rows)))
            rows[i] = (rows[i][0], rows[i][1] + float(rng.integers(1, 10)), rows[i][2])
        order_in = rng.permutation(len(rows))
        starts = np.array([rows[i][0] for i in order_in])
        ends = np.array([rows[i][1] for i in order_in])
        codes = np.array([rows[i][2] for i in order_in], dtype=np.int32)
        counted = rng.integers(0, 2, 3).astype(bool)
        order = np.lexsort((-ends, starts, codes))
        expected = _walked(order, codes, starts, ends, counted)
        found = nested_self_times(order, codes, starts, ends, counted)
        if found is None:  # (spans that overlap without nesting: the walk runs)
            walked += 1
            continue
        nested += 1
        assert np.array_equal(found[0], expected[0]) and np.array_equal(found[1], expected[1]), rows
    assert nested > 150 and walked > 20
    # a negative duration (an op that ends before it starts) is left to the walk
    starts, ends, codes = np.array([0.0, 50.0]), np.array([100.0, 5.0]), np.zeros(2, dtype=np.int32)
    assert nested_self_times(np.lexsort((-ends, starts, codes)), codes, starts, ends, np.ones(1, dtype=bool)) is None


@pytest.mark.parametrize("path", trace_params(WITH_OPS))
def test_a_traces_ops_get_the_walks_self_times_from_array_operations(path):
    from diagnose.trace.load import load_trace
    from diagnose.trace.self_time_rule import _nesting_order, nested_self_times

    ops = load_trace(path, stream=False).cpu_ops
    codes, threads = ops.thread_codes()
    counted = np.ones(len(threads), dtype=bool)
    order = _nesting_order(ops.start, ops.end, codes)
    found = nested_self_times(order, codes, ops.start, ops.end, counted)
    expected = _walked(order, codes, ops.start, ops.end, counted)
    assert found is not None or "kernel_heavy" in path.name  # (its ops overlap without nesting: walked)
    if found is not None:
        assert np.array_equal(found[0], expected[0]) and np.array_equal(found[1], expected[1])


def assert_same_piece(text: bytes):
    """The compiled scanner's one pass gives the spans, memory events and FLOP ops the expressions give."""
    mine, theirs = stream.read_piece(text, jit=True), stream.read_piece(text, jit=False)
    assert_same(mine[:3], theirs[:3])
    (memory, flops), (their_memory, their_flops) = mine[3:], theirs[3:]
    for column in ("ts", "allocated", "reserved", "nbytes", "device_type"):
        assert getattr(memory, column).tobytes() == getattr(their_memory, column).tobytes(), column
    assert memory.tids == their_memory.tids
    assert flops.ts.tobytes() == their_flops.ts.tobytes() and flops.dur.tobytes() == their_flops.dur.tobytes()
    assert [k.key for k in flops.kinds] == [k.key for k in their_flops.kinds]
    assert flops.kind_codes.tolist() == their_flops.kind_codes.tolist()
    assert flops.threads == their_flops.threads and flops.thread_codes.tolist() == their_flops.thread_codes.tolist()
    return mine


def events_of(path) -> bytes:
    """The trace's events, as a stream's piece holds them (from the first event's object to the list's end)."""
    text = gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
    first = text.find(b'"ph"')
    return text[text.rfind(b"{", 0, first):text.rfind(b"]")]


@pytest.mark.parametrize("path", trace_params(ALL))
def test_memory_events_and_flop_ops_read_in_the_scanners_pass_are_the_expressions(path):
    text = events_of(path)
    memory, flops = assert_same_piece(text)[3:]
    if "h200" in str(path):  # recorded with profile_memory and record_shapes: read in the scanner's pass
        assert len(memory) > 100 and len(flops) > 0 and jitscan.scan(text, 0, len(text)).memory is not None


def memory_event(args: str, head: str = '"ph": "i", "cat": "cpu_instant_event", "s": "t", "name": "[memory]"',
                 tail: str = '"pid": 7, "tid": 8, "ts": 12.5') -> str:
    return "{" + head + ", " + tail + ', "args": {' + args + "}}"


ALLOCATION = '"Total Reserved": 0, "Total Allocated": 512, "Bytes": 512, "Device Id": -1, "Device Type": 0'
# each: one memory event (or event like one) -- what it tests
MEMORY_CASES = {
    "torch 2.13": memory_event(ALLOCATION + ', "Addr": 94595681298176, "finished": false, "Ev Idx": 40360'),
    "keys in torch 1.x's order": memory_event('"Device Type": 1, "Device Id": 0, "Addr": 1, "Bytes": -64, '
                                              '"Total Allocated": 0, "Total Reserved": 2097152'),
    "no Total Allocated: not an allocator's": memory_event('"Bytes": 5, "Device Type": 0'),
    "a key twice: the first read": memory_event(ALLOCATION + ', "Bytes": 9'),
    "Bytes not an integer": memory_event('"Total Allocated": 5, "Bytes": 1.5e2, "Device Type": 0'),
    "an amount past 18 digits": memory_event('"Total Allocated": 1234567890123456789, "Bytes": 1'),
    "a string value": memory_event('"Total Allocated": 5, "Bytes": 3, "note": "a, b}", "Device Type": 0'),
    "compact": memory_event(ALLOCATION.replace(" ", ""), '"ph":"i","cat":"cpu_instant_event","s":"t",'
                            '"name":"[memory]"', '"pid":7,"tid":"eight","ts":3'),
    "torch 2.13's lines": memory_event('\n      ' + ALLOCATION + '\n    ', '"ph": "i",\n    \n    '
                                       '"cat": "cpu_instant_event",\n    "s": "t",\n    "name": "[memory]"',
                                       '"pid": 7,\n    "tid": 8,\n    "ts": 5628317421947.704\n    '),
    "a list in the args": memory_event(ALLOCATION + ', "shape": [1, 2]'),
    "name first": '{"name": "[memory]", "ph": "i", "pid": 7, "tid": 8, "ts": 1, "args": {' + ALLOCATION + '}}',
    "another instant": memory_event(ALLOCATION, '"ph": "i", "cat": "cpu_instant_event", "s": "t", "name": "mark"'),
    "an instant named before ph": '{"name": "Record Window End", "ph": "i", "s": "g", "pid": "", "tid": "", "ts": 1}',
    "a complete event named [memory]": memory_event(ALLOCATION, '"ph": "X", "cat": "cpu_op", "name": "[memory]"',
                                                    '"pid": 7, "tid": 8, "ts": 1, "dur": 2'),
    "a ts past 2**53": memory_event(ALLOCATION, tail='"pid": 7, "tid": 8, "ts": 1700000000895278.125'),
}


# the kernel leaves the others' chunk to the expressions
NOT_READ_BY_THE_KERNEL = {"Bytes not an integer", "an amount past 18 digits", "a list in the args", "name first",
                          "a complete event named [memory]"}


@pytest.mark.parametrize("case", sorted(MEMORY_CASES))
def test_each_kind_of_memory_event_is_read_as_the_expressions_read_it(case):
    plain = event(CASES["plain"])
    text = ",\n".join([plain, MEMORY_CASES["torch 2.13"], MEMORY_CASES[case], plain]).encode()
    assert len(assert_same_piece(text)[3]) >= 1
    assert (jitscan.scan(text, 0, len(text)).memory is None) == (case in NOT_READ_BY_THE_KERNEL)


FLOP_CASES = {
    "shapes": '"Input Dims": [[64, 256], [256, 256]], "Input type": ["float", "float"]',
    "concrete inputs": '"Input Dims": [[256], [64, 256], [256, 256], [], []], '
                       '"Concrete Inputs": ["", "", "", "1", "1"]',
    "no shapes": '"External id": 3',
    "an object in the args": '"Input Dims": [[2, 2]], "extra": {"a": 1}',
    "ids, and a member-like string": '"External id": 7,"Sequence number": 12, "Concrete Inputs": ["a, \\"k\\": 5"], '
                                     '"Input Dims": [[2, 2]], "Ev Idx": 9, "alpha": 1.5',
}
# ops of one kind differ in their ids; these differ in what is read, where only an integer's text differs
OTHER_KINDS = ['"External id": 8, "Concrete Inputs": ["a, \\"k\\": 6"], "Input Dims": [[2, 2]], "Ev Idx": 1',
               '"External id": 8, "Concrete Inputs": ["a, \\"k\\": 5"], "Input Dims": [[2, 3]], "Ev Idx": 1',
               '"External id": 9, "Concrete Inputs": ["a, \\"k\\": 5"], "Input Dims": 4, "Input Dims": [[2, 2]]',
               '"External id": 9, "Concrete Inputs": ["a, \\"k\\": 5"], "Input Dims": [[2, 2]], "Input Dims": 4']


@pytest.mark.parametrize("case", sorted(FLOP_CASES))
def test_flop_ops_are_read_in_the_scanners_pass_as_the_expression_reads_them(case):
    op = event('"cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 2, "ts": 3.25, "dur": 4', ', "args": {'
               + FLOP_CASES[case] + '}')
    bare = event('"cat": "cpu_op", "name": "aten::addmm", "pid": 1, "tid": 2, "ts": 9, "dur": 1')
    others = [event('"cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 2, "ts": 5, "dur": 1', ', "args": {'
                    + args + '}') for args in OTHER_KINDS]
    text = ",\n".join([event(CASES["plain"]), op, bare, op, *others]).encode()
    flops = assert_same_piece(text)[4]
    assert len(flops) == 3 + len(others) and len(flops.kinds) >= 3


def _parents_both_ways(monkeypatch, codes, starts, ends, outliving=False):
    from diagnose.trace import self_time_rule

    order = np.lexsort((-ends, starts, codes))
    with monkeypatch.context() as patched:
        patched.setattr(jitscan, "for_size", lambda size: None)
        counted = self_time_rule.nesting_parents(order, codes, starts, ends, outliving)
    with monkeypatch.context() as patched:
        patched.setattr(jitscan, "for_size", lambda size: jitscan._kernels())
        walked = self_time_rule._walked_parents(codes[order], starts[order], ends[order])
        either = self_time_rule.nesting_parents(order, codes, starts, ends, outliving)
    if counted is None:
        assert either is None
    else:
        assert all(np.array_equal(a, b) for a, b in zip(counted, either))
    return counted, walked


@pytest.mark.parametrize("path", trace_params(WITH_OPS))
def test_parents_walked_by_numba_are_those_the_counts_give(path, monkeypatch):
    from diagnose.trace.load import load_trace

    trace = load_trace(path, stream=False)
    for spans in (trace.cpu_ops, trace.python):
        if len(spans):
            codes = spans.thread_codes()[0].astype(np.int64)
            counted, walked = _parents_both_ways(monkeypatch, codes, spans.start, spans.end)
            if walked is not None:  # where the walk answers, it gives the counts' answer
                assert counted is not None and all(np.array_equal(a, b) for a, b in zip(counted, walked))


@pytest.mark.parametrize("case", ["nested, with instants and equal spans", "a child outlives its parent",
                                  "two threads"])
def test_parents_walked_by_numba_on_each_kind_of_nesting(case, monkeypatch):
    spans = {
        "nested, with instants and equal spans": [(0, 0, 10), (0, 0, 10), (0, 2, 2), (0, 2, 5), (0, 5, 5), (0, 5, 9),
                                                  (0, 10, 10), (0, 10, 12), (0, 12, 12)],
        "a child outlives its parent": [(0, 0, 10), (0, 5, 12), (0, 11, 13)],
        "two threads": [(1, 0, 4), (0, 1, 3), (1, 1, 2), (0, 2, 3), (1, 3, 4)],
    }[case]
    columns = zip(*spans)
    codes, starts, ends = (np.array(column, dtype=dtype) for column, dtype in zip(columns, (np.int64, float, float)))
    for outliving in (False, True):
        counted, walked = _parents_both_ways(monkeypatch, codes, starts, ends, outliving)
        assert (walked is None) == (case == "a child outlives its parent")
        if walked is not None:
            assert all(np.array_equal(a, b) for a, b in zip(counted, walked))
