"""The largest batch that fits under a memory limit. Memory grows with the batch nearly in a line: what every step
holds (parameters, gradients, optimizer state, the runtime) plus activations and the batch itself per sample. Two
measured batch sizes give the line; the line, less a margin, predicts the largest batch; short runs verify it,
bisecting between the largest batch that fitted and the smallest that did not (allocators round and fragment,
so the line is a guide, the runs are the answer). As DeepSpeed's autotuner models memory and Lightning's
BatchSizeFinder bisects, but on the user's unchanged script, under the limit it will train with."""
from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Callable, Optional

from diagnose.model import BatchProbe, BatchSearch

MARGIN = 0.05  # of the limit left free by the prediction: a longer run fragments more than three steps do
MAX_PROBES = 10  # short runs at most: each is a process start and three steps
RESOLUTION = 8  # bisect until the gap between fit and failure is under 1/RESOLUTION of the batch

Prober = Callable[[int], Optional[BatchProbe]]  # None: no budget left for another run


@dataclass(frozen=True)
class Line:
    fixed_bytes: float
    per_sample_bytes: float

    def largest_under(self, bytes_: float) -> int:
        return int((bytes_ - self.fixed_bytes) // self.per_sample_bytes) if self.per_sample_bytes > 0 else 0


def search_largest_batch(probe: Prober, start: int, fits_at_start: bool, limit_bytes: int, limit_source: str,
                         max_batch: int) -> BatchSearch:
    """From the script's own batch `start` (which fitted or ran out of memory), find the largest batch up to
    `max_batch` that fits under `limit_bytes`."""
    return finish_search(first_fit(probe, start, fits_at_start, limit_bytes, limit_source, max_batch))


def first_fit(probe: Prober, start: int, fits_at_start: bool, limit_bytes: int, limit_source: str,
              max_batch: int) -> "_Search":
    """The search's first part: the script's batch when it fits, else halvings until one fits (`.lo`, 0 when
    none did). After a run out of memory this is what accumulation needs, and the rest can wait (finish_search)."""
    search = _Search(probe, BatchSearch(limit_bytes, limit_source, MARGIN, max_batch=max_batch, start_batch=start))
    search.fitted_first = search.first_fit(start, fits_at_start)
    return search


def finish_search(search: "_Search") -> BatchSearch:
    """The rest: a second batch for the line, its prediction, the bisection; with the runs the budget allows."""
    max_batch = search.result.max_batch
    if not search.fitted_first or not search.second_fit(max_batch):
        return search.done()
    line = fitted_line(search.fitting())
    if line is not None:
        search.result = replace(search.result, fixed_bytes=int(line.fixed_bytes),
                                per_sample_bytes=line.per_sample_bytes)
        predicted = _round_down(min(max_batch, line.largest_under(search.result.limit_bytes * (1 - MARGIN))))
        search.result = replace(search.result, predicted_batch=predicted)
        if search.lo < predicted < search.hi:
            search.try_batch(predicted)
    search.bisect(max_batch)
    return search.done()


def fitted_line(probes: list[BatchProbe]) -> Optional[Line]:
    """The line through the two largest batches that fitted with a measured peak; None when memory did not grow
    with the batch (too noisy to say)."""
    measured = sorted({p.batch_size: p for p in probes if p.fits and p.peak_bytes is not None}.values(),
                      key=lambda p: p.batch_size)[-2:]
    if len(measured) < 2:
        return None
    (b1, p1), (b2, p2) = [(p.batch_size, p.peak_bytes) for p in measured]
    per_sample = (p2 - p1) / (b2 - b1)
    if per_sample <= 0:
        return None
    return Line(p2 - per_sample * b2, per_sample)


class _Search:
    def __init__(self, probe: Prober, result: BatchSearch):
        self.probe, self.result = probe, result
        self.lo = 0  # the largest batch that fitted
        self.hi = math.inf  # the smallest batch that did not
        self.out_of_budget = False
        self.broken = ""  # a short run failed for another reason than memory: the search cannot go on

    def try_batch(self, batch: int) -> Optional[bool]:
        if len(self.result.probes) >= MAX_PROBES or self.out_of_budget or self.broken:
            return None
        found = self.probe(batch)
        if found is None:
            self.out_of_budget = True
            return None
        self.result = replace(self.result, probes=self.result.probes + (found,))
        if not found.fits and not found.out_of_memory:
            self.broken = f"the run at batch {batch} failed: {found.detail}"
            return None
        if not found.fits and self._surprising(batch) and len(self.result.probes) < MAX_PROBES:
            return self.try_batch(batch)  # once: the second run at this batch is no longer a surprise
        if found.fits:
            self.lo = max(self.lo, batch)
        else:
            self.hi = min(self.hi, batch)
        return found.fits

    def _surprising(self, batch: int) -> bool:
        """Out of memory the first time at a batch the line (from runs that fitted) says fits: worth one more run.
        On the host, allocator arenas (64 MiB of address space per thread that allocates, made as threads
        contend) moved one batch's peak by 50 MiB and more from run to run; one such failure stopped a search at
        1856 where 4096 fits."""
        line = fitted_line(self.fitting())
        if line is None or sum(p.batch_size == batch for p in self.result.probes) > 1:
            return False
        return batch <= line.largest_under(self.result.limit_bytes)

    def fitting(self) -> list[BatchProbe]:
        return [p for p in self.result.probes if p.fits]

    fitted_first = False

    def first_fit(self, start: int, fits_at_start: bool) -> bool:
        """The script's batch when it fits; else halvings until one fits (after two that do not, a batch of one:
        if even that does not fit nothing will, and if it does, the bisection finds the rest faster than halving
        on). False when none fitted or the runs ran out."""
        if fits_at_start:
            return bool(self.try_batch(start))
        self.hi = min(self.hi, start)
        batch, failures = start, 0
        while batch > 1:
            batch = 1 if failures == 2 else batch // 2
            fits = self.try_batch(batch)
            if fits is None:
                return False
            if fits:
                return True
            failures += 1
        return False

    def second_fit(self, max_batch: int) -> bool:
        """A second batch size for the line: double the first fit when it was the script's own, else half it."""
        first = self.lo
        if first >= max_batch or first == 1:
            return True
        grown = self.result.start_batch == first and self.hi == math.inf
        return self.try_batch(min(2 * first, max_batch) if grown else max(1, first // 2)) is not None

    def bisect(self, max_batch: int) -> None:
        """Between the largest fit and the smallest failure (doubling while none failed) to RESOLUTION: at the
        line's prediction when it falls inside and was not run yet, else halfway (on a log scale when far apart)."""
        while self.lo and self.lo < max_batch:
            if self.hi == math.inf:  # none failed yet: just past the line's edge, else double
                edge = self._past_edge()
                nxt = min(max_batch, edge if edge is not None and edge > self.lo else 2 * self.lo)
            elif self.hi - self.lo <= max(1, self.lo // RESOLUTION):
                return
            else:
                nxt = self._next_inside()
            if self.try_batch(nxt) is None:
                return

    def _next_inside(self) -> int:
        """The line's safe prediction (under the limit less the margin); once that fits, just past where the line
        meets the limit, to bracket the edge; else halfway."""
        line = fitted_line(self.fitting())
        tried = {p.batch_size for p in self.result.probes}
        hi = int(self.hi)
        # a guess must cut the bracket by a fair share at either end: a line refitted from two nearby fits
        # (noisy peaks) kept guessing a step above the last fit, spending the runs without closing the gap
        step = max(1, (hi - self.lo) // 4)
        if line is not None:
            safe = _round_down(line.largest_under(self.result.limit_bytes * (1 - self.result.margin)))
            for guess in (safe, self._past_edge()):
                if guess is not None and self.lo + step <= guess <= hi - step and guess not in tried:
                    return guess
        middle = math.isqrt(self.lo * hi) if hi > 4 * self.lo else (self.lo + hi) // 2
        return _round_batch(middle, self.lo, hi)

    def _past_edge(self) -> Optional[int]:
        """Just past where the line meets the limit (by the bisection's resolution): expected not to fit."""
        line = fitted_line(self.fitting())
        if line is None:
            return None
        return line.largest_under(self.result.limit_bytes) + max(1, self.lo // RESOLUTION)

    def done(self) -> BatchSearch:
        largest = self.lo or None
        failing = None if self.hi == math.inf else int(self.hi)
        return replace(self.result, largest_fitting=largest, smallest_failing=failing, note=self._note(largest),
                       recommended=self._recommended(largest))

    def _recommended(self, largest: Optional[int]) -> Optional[int]:
        """The largest fit whose peak leaves the margin (else the smallest fit); the largest fit when no peak was
        read."""
        fitted = [p for p in self.result.probes if p.fits]
        measured = [p for p in fitted if p.peak_bytes is not None]
        if not measured:
            return largest
        roomy = [p.batch_size for p in measured if p.peak_bytes <= self.result.limit_bytes * (1 - self.result.margin)]
        return max(roomy) if roomy else min(p.batch_size for p in fitted)

    def _note(self, largest: Optional[int]) -> str:
        max_batch = self.result.max_batch
        if largest is None:
            if self.hi == 1:  # a batch of one ran out of memory: the script's own, or a short run's
                return "does not fit even with a batch of 1"
            return "stopped before a batch that fits was found: " + self._why_stopped()
        if largest == max_batch:
            return f"fits up to the whole dataset's {max_batch} samples: memory does not limit the batch"
        if self.hi != math.inf and self.hi - largest <= max(1, largest // RESOLUTION):
            return f"{largest} fits and {int(self.hi)} does not"
        return f"{largest} fits; the search stopped there: " + self._why_stopped()

    def _why_stopped(self) -> str:
        if self.broken:
            return self.broken
        if self.out_of_budget:
            return "the experiment budget ran out (--budget-seconds)"
        return f"the search's {MAX_PROBES} short runs were spent"


def _round_down(batch: int) -> int:
    """To a multiple of 8 from 64 up: kernels prefer them, and the margin covers the difference."""
    return batch // 8 * 8 if batch >= 64 else batch


def _round_batch(batch: int, lo: int, hi: int) -> int:
    """A multiple of 8 (kernels prefer them) when one lies strictly between the bounds; else the batch itself."""
    rounded = batch // 8 * 8
    return rounded if lo < rounded < hi and rounded >= 8 else batch
