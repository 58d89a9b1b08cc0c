"""The interval passes a big trace's analysis runs (interval_sweeps.py, compiled by numba) give numpy's forms'
results exactly: on random sets full of ties, touching and zero-length intervals, and on every test trace's whole
analysis with the passes on for every size."""
from __future__ import annotations

import numpy as np
import pytest
from conftest import TRACES

import diagnose.analysis.intervals as iv
from diagnose.analysis import interval_sweeps, jitscan
from diagnose.analysis.analyze import Inputs, analyze
from diagnose.analysis.trace import load_trace
from diagnose.serial import to_jsonable

KERNELS = [pytest.param(interval_sweeps, id="plain-python")] + (
    [pytest.param("compiled", id="numba")] if jitscan.usable() else [])


def random_intervals(rng, n: int, span: int = 40) -> np.ndarray:
    """Integer-valued times on a short range: many equal starts, touching ends and zero-length intervals."""
    start = rng.integers(0, span, n).astype(np.float64)
    return np.column_stack([start, start + rng.integers(0, 6, n)])


def numpy_forms(monkeypatch):
    monkeypatch.setattr(iv, "_kernels", lambda size: None)


def sweeps(monkeypatch, kernels):
    monkeypatch.setattr(iv, "_kernels", lambda size: jitscan._kernels() if kernels == "compiled" else kernels)


def results(a: np.ndarray, b: np.ndarray) -> list:
    chain_a, chain_b = iv.union(a), iv.union(b)
    return [iv.union(a), iv.intersect(chain_a, chain_b), iv.subtract(chain_a, chain_b),
            iv.subtract(chain_a, chain_b[::2]), iv.intersect(a, chain_b)]  # the last: `a` not a chain


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
def test_zero_length_and_touching_intervals_as_numpy_takes_them(kernels, monkeypatch):
    sweeps(monkeypatch, kernels)
    assert iv.union(np.array([[3.0, 3.0], [3.0, 5.0], [5.0, 6.0], [8.0, 8.0]])).tolist() == [[3, 6], [8, 8]]
    # a zero-length cut splits nothing; an interval of a inside nothing of b is kept whole
    assert iv.subtract(np.array([[0.0, 5.0]]), np.array([[2.0, 2.0]])).tolist() == [[0, 5]]
    assert iv.intersect(np.array([[0.0, 5.0]]), np.array([[5.0, 7.0]])).tolist() == []
    assert iv.subtract(np.array([[3.0, 3.0]]), np.array([[0.0, 1.0]])).tolist() == []


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
    counting = Counting(jitscan._kernels())
    sweeps(monkeypatch, counting)
    assert to_jsonable(analyze(Inputs(trace))) == expected
    assert counting.calls > 10  # the passes ran, not numpy's forms
    # the analysis passes the types the sample check compiled: no second compilation (seconds each)
    kernels = jitscan._kernels()
    assert all(len(k.signatures) == 1 for k in (kernels.union_into, kernels.coverage_into, kernels.is_chain))
