"""The largest-batch search as an algorithm: a memory curve stands in for the short runs (the real runs are in
test_memory.py's slow tests), so every branch is checked in milliseconds: the line fitted from two batch sizes,
the prediction under the limit less the margin, the bisection that verifies it, and what it says when nothing
fits or the budget runs out. Also the micro-batch chosen from the result and the throughput interval."""
from __future__ import annotations

import math

import pytest

from diagnose.experiments.batch_search import MARGIN, MAX_PROBES, fitted_line, search_largest_batch
from diagnose.model import BatchProbe
from diagnose.optimizations.grad_accumulation import micro_batches_to_fit
from diagnose.verdict.stats import Noise, throughput_interval

MiB = 2**20


def curve(fixed: float, per_sample: float, limit: float, wobble: float = 0.0):
    """A prober over memory = fixed + per_sample x batch (+ a deterministic wobble, as allocators round)."""
    calls = []

    def probe(batch: int):
        calls.append(batch)
        need = fixed + per_sample * batch + wobble * math.sin(batch)
        fits = need <= limit
        return BatchProbe(batch, fits, int(need if fits else limit * 0.97), out_of_memory=not fits)

    probe.calls = calls
    return probe


def test_the_line_predicts_and_the_runs_verify_the_largest_batch():
    limit = 700 * MiB
    probe = curve(200 * MiB, 0.1 * MiB, limit)
    search = search_largest_batch(probe, 256, True, limit, "--memory-limit", 8192)
    truth = int((limit - 200 * MiB) // (0.1 * MiB))  # 5000
    assert probe.calls[:2] == [256, 512]  # the script's own batch, then double it: two points for the line
    assert abs(search.fixed_bytes - 200 * MiB) < MiB and abs(search.per_sample_bytes - 0.1 * MiB) < 1
    assert search.predicted_batch == int((limit * (1 - MARGIN) - 200 * MiB) // (0.1 * MiB)) // 8 * 8
    assert search.largest_fitting <= truth < search.smallest_failing
    assert search.smallest_failing - search.largest_fitting <= search.largest_fitting // 8
    assert len(search.probes) <= MAX_PROBES and "does not" in search.note


def test_a_run_that_ran_out_of_memory_halves_until_two_batches_fit():
    limit = 700 * MiB
    probe = curve(200 * MiB, 0.1 * MiB, limit, wobble=5 * MiB)
    search = search_largest_batch(probe, 8192, False, limit, "--memory-limit", 8192)
    assert probe.calls[:2] == [4096, 2048]  # 4096 fits (610 MiB), then half of it for the line
    assert 4096 <= search.largest_fitting < search.smallest_failing <= 8192
    assert search.largest_fitting <= 5000 < search.smallest_failing


def test_when_memory_never_runs_out_the_search_stops_at_the_dataset():
    probe = curve(200 * MiB, 0.001 * MiB, 10**12)
    search = search_largest_batch(probe, 64, True, 10**12, "the machine's available memory", 4096)
    assert search.largest_fitting == 4096 and search.smallest_failing is None
    assert "whole dataset" in search.note


def test_nothing_fits_even_a_batch_of_one():
    probe = curve(800 * MiB, 0.1 * MiB, 700 * MiB)
    search = search_largest_batch(probe, 256, False, 700 * MiB, "--memory-limit", 256)
    assert probe.calls == [128, 64, 1] and search.largest_fitting is None  # two halvings, then straight to one
    assert search.note == "does not fit even with a batch of 1"


def test_when_halving_twice_does_not_fit_a_batch_of_one_is_tried_and_the_rest_bisected():
    probe = curve(200 * MiB, 4 * MiB, 700 * MiB)  # fits up to 125
    search = search_largest_batch(probe, 4096, False, 700 * MiB, "--memory-limit", 4096)
    assert probe.calls[:3] == [2048, 1024, 1] and search.largest_fitting <= 125 < search.smallest_failing
    assert search.smallest_failing - search.largest_fitting <= max(1, search.largest_fitting // 8)


def test_a_budget_that_runs_out_stops_the_search_and_says_so():
    inner = curve(200 * MiB, 0.1 * MiB, 700 * MiB)
    budget = [3]

    def probe(batch):
        budget[0] -= 1
        return inner(batch) if budget[0] >= 0 else None

    search = search_largest_batch(probe, 256, True, 700 * MiB, "--memory-limit", 8192)
    assert len(search.probes) == 3 and "budget ran out" in search.note
    assert search.largest_fitting is not None  # what was verified is kept


def test_a_run_that_fails_for_another_reason_stops_the_search():
    def probe(batch):
        if batch > 256:
            return BatchProbe(batch, False, None, detail="ValueError: batch too large for this sampler")
        return BatchProbe(batch, True, 300 * MiB)

    search = search_largest_batch(probe, 256, True, 700 * MiB, "--memory-limit", 8192)
    assert search.largest_fitting == 256 and "ValueError" in search.note and len(search.probes) == 2


def test_the_line_needs_two_batch_sizes_whose_memory_grows():
    assert fitted_line([BatchProbe(256, True, 400)]) is None
    assert fitted_line([BatchProbe(256, True, 400), BatchProbe(512, True, 390)]) is None  # noise, not a line
    line = fitted_line([BatchProbe(256, True, 400), BatchProbe(512, True, 656), BatchProbe(9000, False, None)])
    assert line.per_sample_bytes == 1.0 and line.fixed_bytes == 144 and line.largest_under(1144) == 1000


@pytest.mark.parametrize("batch, largest, micro", [(8192, 5000, 2), (8192, 3000, 4), (96, 40, 3), (100, 30, 4),
                                                   (97, 40, 3), (64, 100, 2)])
def test_the_micro_batch_is_the_fewest_that_fit_and_keeps_the_effective_batch(batch, largest, micro):
    k = micro_batches_to_fit(batch, largest)
    assert k == micro and batch // k <= max(largest, batch // 2)
    if batch % k == 0:
        assert k * (batch // k) == batch


def test_a_throughput_interval_uses_the_pooled_noise():
    rate, (lo, hi) = throughput_interval([100.0, 110.0], Noise(0.01, 10))
    assert abs(rate - math.sqrt(100 * 110)) < 1e-9 and lo < rate < hi
    assert throughput_interval([100.0], None) is None


def test_a_script_that_ran_out_at_a_batch_of_one_needs_no_short_run_to_say_so():
    probe = curve(800 * MiB, 0.1 * MiB, 700 * MiB)
    search = search_largest_batch(probe, 1, False, 700 * MiB, "--memory-limit", 1)
    assert probe.calls == [] and search.largest_fitting is None
    assert search.note == "does not fit even with a batch of 1"


def test_the_recommended_batch_leaves_the_margin_the_largest_fit_may_not():
    limit = 700 * MiB
    search = search_largest_batch(curve(200 * MiB, 0.1 * MiB, limit), 256, True, limit, "--memory-limit", 8192)
    peaks = {p.batch_size: p.peak_bytes for p in search.probes if p.fits}
    assert search.recommended <= search.largest_fitting and peaks[search.recommended] <= limit * (1 - MARGIN)
    assert all(b <= search.recommended or peak > limit * (1 - MARGIN) for b, peak in peaks.items())


def test_a_failure_far_under_the_line_is_run_once_more_before_it_bounds_the_search():
    """Allocator noise: the line's prediction (4648; the edge is at 5000) runs out of memory once, as a run at
    about 2000 did on CI and stopped the search at 1856 where 4096 fits; the line says it fits, so it runs again,
    fits, and the search goes on."""
    inner = curve(200 * MiB, 0.1 * MiB, 700 * MiB)

    def probe(batch):
        if len(inner.calls) == 2:
            inner.calls.append(batch)
            return BatchProbe(batch, False, int(0.97 * 700 * MiB), out_of_memory=True)
        return inner(batch)

    search = search_largest_batch(probe, 256, True, 700 * MiB, "--memory-limit", 8192)
    assert inner.calls[2] == inner.calls[3] == 4648 and search.largest_fitting >= 4648
    assert search.largest_fitting <= 5000 < search.smallest_failing


def test_an_out_of_memory_near_the_line_is_believed_first_time():
    probe = curve(200 * MiB, 0.1 * MiB, 700 * MiB)
    search_largest_batch(probe, 256, True, 700 * MiB, "--memory-limit", 8192)
    assert len(probe.calls) == len(set(probe.calls))  # no batch was run twice


def test_noisy_peaks_still_close_the_bracket_to_an_eighth():
    """Peaks that wobble by 60 MiB (as the host's did here) bend the refitted line; each guess must still cut the
    bracket, so the runs end with fit and failure an eighth apart, not stuck a step above the last fit."""
    probe = curve(200 * MiB, 0.1 * MiB, 700 * MiB, wobble=60 * MiB)
    search = search_largest_batch(probe, 256, True, 700 * MiB, "--memory-limit", 8192)
    assert search.smallest_failing - search.largest_fitting <= search.largest_fitting // 8, search.probes
