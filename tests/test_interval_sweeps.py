"""The passes a big trace's analysis runs (interval_sweeps.py, key_join.py and nesting.py's outermost walk,
compiled by numba) give numpy's forms' (and plain Python's) results exactly: on random sets full of ties, touching
and zero-length intervals, on launch lookups with repeated and missing correlation ids, and on real traces' whole
analysis with the passes on for every size."""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
from conftest import TRACES

import diagnose.trace.intervals as iv
from diagnose.analysis.analyze import Inputs, analyze
from diagnose.serial import to_jsonable
from diagnose.trace import interval_sweeps, jitscan, key_join, nesting
from diagnose.trace.load import load_trace
from diagnose.trace.spans import Spans

PLAIN = SimpleNamespace(**{name: getattr(module, name) for module in (interval_sweeps, key_join, nesting)
                           for name in dir(module) if not name.startswith("_")})
KERNELS = [pytest.param(PLAIN, id="plain-python")] + (
    [pytest.param("compiled", id="numba")] if jitscan.usable() else [])


def random_intervals(rng, n: int, span: int = 40) -> np.ndarray:
    """Integer-valued times on a short range (some negative): many equal starts, touching ends and zero-length
    intervals."""
    start = rng.integers(-span // 4, span, n).astype(np.float64)
    return np.column_stack([start, start + rng.integers(0, 6, n)])


def numpy_forms(monkeypatch):
    monkeypatch.setattr(jitscan, "for_size", lambda size: None)


def sweeps(monkeypatch, kernels):
    monkeypatch.setattr(jitscan, "for_size", lambda size: jitscan._kernels() if kernels == "compiled" else kernels)


def spans_of(a: np.ndarray) -> Spans:
    codes = np.zeros(len(a), dtype=np.int32)
    return Spans(a[:, 0].copy(), a[:, 1].copy(), codes, ["op"], codes.copy(), [(0, 0)])


def results(a: np.ndarray, b: np.ndarray) -> list:
    chain_a, chain_b = iv.union(a), iv.union(b)
    picked = np.arange(len(a)) % 3 != 1
    return [iv.union(a), iv.intersect(chain_a, chain_b), iv.subtract(chain_a, chain_b),
            iv.subtract(chain_a, chain_b[::2]), iv.intersect(a, chain_b),  # `a` not a chain: numpy's form
            iv.union_of(spans_of(a)), iv.union_of(spans_of(a), picked), iv.union_of(spans_of(a), picked & False)]


@pytest.mark.parametrize("kernels", KERNELS)
def test_the_passes_give_numpys_intervals(kernels, monkeypatch):
    rng = np.random.default_rng(7)
    for _ in range(300):
        a, b = random_intervals(rng, int(rng.integers(1, 30))), random_intervals(rng, int(rng.integers(1, 30)))
        numpy_forms(monkeypatch)
        expected = results(a, b)
        sweeps(monkeypatch, kernels)
        for mine, theirs in zip(results(a, b), expected):
            assert mine.shape == theirs.shape and np.array_equal(mine, theirs), (a.tolist(), b.tolist())


@pytest.mark.parametrize("kernels", KERNELS)
def test_a_nan_time_gives_numpys_result_and_never_hangs_a_sweep(kernels, monkeypatch):
    # a trace's "ts": -1e400 and "dur": 1e400 end at -inf + inf: NaN, which no comparison orders
    a = np.array([[0.0, 2.0], [1.0, np.nan], [5.0, 6.0], [np.nan, 9.0]])
    b = np.array([[1.0, 3.0], [4.0, 7.0]])
    numpy_forms(monkeypatch)
    expected = [iv.union(a), iv.intersect(a, b), iv.subtract(a, b), iv.subtract(b, a)]
    sweeps(monkeypatch, kernels)
    for mine, theirs in zip([iv.union(a), iv.intersect(a, b), iv.subtract(a, b), iv.subtract(b, a)], expected):
        assert np.array_equal(mine, theirs, equal_nan=True)


@pytest.mark.parametrize("kernels", KERNELS)
def test_zero_length_and_touching_intervals_as_numpy_takes_them(kernels, monkeypatch):
    sweeps(monkeypatch, kernels)
    assert iv.union(np.array([[3.0, 3.0], [3.0, 5.0], [5.0, 6.0], [8.0, 8.0]])).tolist() == [[3, 6], [8, 8]]
    # a zero-length cut splits nothing; an interval of a inside nothing of b is kept whole
    assert iv.subtract(np.array([[0.0, 5.0]]), np.array([[2.0, 2.0]])).tolist() == [[0, 5]]
    assert iv.intersect(np.array([[0.0, 5.0]]), np.array([[5.0, 7.0]])).tolist() == []
    assert iv.subtract(np.array([[3.0, 3.0]]), np.array([[0.0, 1.0]])).tolist() == []


@pytest.mark.parametrize("kernels", KERNELS)
def test_the_launch_lookup_gives_numpys_values(kernels, monkeypatch):
    from diagnose.trace.launches import from_launch

    rng = np.random.default_rng(3)

    def spans(corr: np.ndarray) -> Spans:
        zeros = np.zeros(len(corr))
        return Spans(zeros, zeros, np.zeros(len(corr), dtype=np.int32), ["k"], np.zeros(len(corr), dtype=np.int32),
                     [(0, 0)], corr)

    for ascending in (False, True):
        for _ in range(100):
            launches = rng.integers(-1, 25, int(rng.integers(1, 40)))  # repeated ids, and -1: none
            launches = np.sort(launches) if ascending else launches
            runtime, work = spans(launches), spans(rng.integers(-1, 30, int(rng.integers(1, 40))))
            trace, values = SimpleNamespace(runtime=runtime), np.arange(len(launches)) * 10
            numpy_forms(monkeypatch)
            expected = from_launch(trace, work, values)
            sweeps(monkeypatch, kernels)
            found = from_launch(trace, work, values)
            assert found.dtype == expected.dtype and found.tolist() == expected.tolist(), launches.tolist()


PASSES = ("ascending", "union_into", "is_chain", "coverage_into", "values_by_key", "walk_outermost",
          "in_thread_order", "walk_nesting",
          "walk_first_seen")


@pytest.mark.parametrize("kernels", KERNELS)
def test_ops_in_thread_order_are_found_as_lexsort_would_order_them(kernels):
    kernels = jitscan._kernels() if kernels == "compiled" else kernels
    rng = np.random.default_rng(5)
    found = 0
    for _ in range(400):
        n = int(rng.integers(1, 12))
        codes = rng.integers(0, 3, n).astype(np.int32)
        starts, ends = rng.integers(0, 4, n).astype(np.float64), rng.integers(4, 7, n).astype(np.float64)
        if rng.random() < 0.5:  # each thread's ops by start, the longest first, threads interleaved
            by_op = np.lexsort((-ends, starts))
            starts, ends = starts[by_op], ends[by_op]
        expected = np.array_equal(np.lexsort((-ends, starts, codes)), np.argsort(codes, kind="stable"))
        assert bool(kernels.in_thread_order(codes, starts, ends, np.full(3, -1, dtype=np.int64))) == expected
        found += expected
    assert 100 < found < 400  # both answers were asked for


class Counting:
    def __init__(self, kernels):
        self.kernels, self.calls = kernels, 0

    def __getattr__(self, name):
        self.calls += 1
        return getattr(self.kernels, name)


HEAVY = sorted(p for p in (TRACES / "h200").glob("*.json.gz"))[:2] + [TRACES / "a100_ddp_rank3_of8.json.gz"]


@pytest.mark.skipif(not jitscan.usable(), reason="numba is not installed here")
@pytest.mark.parametrize("path", HEAVY, ids=[p.name for p in HEAVY])
def test_an_analysis_with_every_interval_swept_is_the_same(path, monkeypatch):
    trace = load_trace(path, stream=False)
    numpy_forms(monkeypatch)
    expected = to_jsonable(analyze(Inputs(trace)))
    kernels = jitscan._kernels()
    compiled = {name: len(getattr(kernels, name).signatures) for name in PASSES}
    counting = Counting(kernels)
    sweeps(monkeypatch, counting)
    assert to_jsonable(analyze(Inputs(trace))) == expected
    assert counting.calls > 10  # the passes ran, not numpy's forms
    # the analysis passes the types the sample check compiled: no compilation (seconds each) during an analysis
    assert {name: len(getattr(kernels, name).signatures) for name in PASSES} == compiled


@pytest.mark.parametrize("kernels", KERNELS)
def test_codes_in_order_of_first_appearance_as_numpy_finds_them(kernels, monkeypatch):
    from diagnose.trace.spans import present_in_order

    rng = np.random.default_rng(11)
    cases = [rng.integers(0, 9, int(rng.integers(1, 30))).astype(np.int32) for _ in range(50)]
    cases.append(np.array([3, -1, 3, 0], dtype=np.int32))  # a negative code: numpy's form takes it
    for codes in cases:
        numpy_forms(monkeypatch)
        expected = present_in_order(codes)
        sweeps(monkeypatch, kernels)
        assert present_in_order(codes).tolist() == expected.tolist()
