"""B's step time over A's from windows they timed taking turns, with a 99% interval; and the gate's decision.

Each pair is two windows next to each other in time, one of A and one of B, so that the machine's drift (other
load, clocks, a VM's neighbours) is shared by both: its log ratio is one sample. Windows run in the order
A B B A A B B A ..., so a steady drift within a round favours neither side.

Within one round A and B are each one process, and a process has its own luck (where its memory and threads
landed): the pairs of one round all share A's and B's. Rounds start fresh processes, and the spread of the
rounds' means beyond what their pairs predict is that luck (a random-effects estimate, DerSimonian-Laird); the
interval counts it, with Satterthwaite's degrees of freedom, so one lucky pair of processes cannot decide a
gate. At least two rounds are run for that reason.

A round's pairs are summarised by their 20% trimmed mean: another process's burst of work (a 2-core CI machine is
never idle) slows whichever window it lands in, A's or B's equally often, and a few such pairs far out on either
side would widen a plain mean's interval by half. When the far pairs lean to one side (B slow now and then: work
done every so many steps), trimming would cut a real cost away, so the plain mean is used and the reason said."""
from __future__ import annotations

import math
from dataclasses import dataclass
from statistics import median
from typing import Optional, Sequence

from diagnose.model import LiveWindow, Verdict
from diagnose.verdict.stats import UNDECIDED_WIDTH, t_quantile

TRIM = 0.2  # each round's pairs are summarised by their 20% trimmed mean


@dataclass(frozen=True)
class Interval:
    ratio: float  # B's step time over A's (above 1: B is slower)
    ci: tuple[float, float]
    pair_sd: float  # spread of one pair's log ratio, within rounds
    process_sd: float  # spread of a round's mean beyond its pairs' (fresh processes' luck); 0 when none is seen
    df: float
    pairs: int
    trim: float = TRIM  # the share of pairs trimmed from each end of a round (0: the far ones leaned to one side)


def pair_log_ratios(windows: Sequence[LiveWindow]) -> tuple[float, ...]:
    """log(B's step time / A's) of each A window and B window that ran next to each other, in order (A B, B A,
    ...); a window left without a partner (the round ended) makes no pair."""
    ratios, waiting = [], None
    for window in windows:
        if window.steps <= 0 or window.seconds <= 0:
            continue
        if waiting is None or waiting.side == window.side:
            waiting = window
            continue
        a, b = (waiting, window) if waiting.side == "A" else (window, waiting)
        ratios.append(math.log(b.seconds / b.steps) - math.log(a.seconds / a.steps))
        waiting = None
    return tuple(ratios)


def interval(rounds: Sequence[Sequence[float]]) -> Optional[Interval]:
    """The interval from each round's pair log ratios; None until two pairs have been timed."""
    rounds = [sorted(r) for r in rounds if r]
    pairs = sum(len(r) for r in rounds)
    if pairs < 2 or pairs - len(rounds) < 1:
        return None
    trim = 0.0 if one_sided_outliers(rounds) else TRIM
    summaries = [_trimmed(r, trim) for r in rounds]
    means = [m for m, _, _ in summaries]
    within_df = sum(h - 1 for _, _, h in summaries)
    within = max(sum((h - 1) * v for _, v, h in summaries) / within_df, 1e-12)
    tau2 = _between_rounds(rounds, means, within)
    weights = [1.0 / (within / len(r) + tau2) for r in rounds]
    mean = sum(w * m for w, m in zip(weights, means)) / sum(weights)
    variance = 1.0 / sum(weights)
    df = _satterthwaite(rounds, within, within_df, tau2)
    half = t_quantile(df) * math.sqrt(variance)
    return Interval(math.exp(mean), (math.exp(mean - half), math.exp(mean + half)), math.sqrt(within),
                    math.sqrt(tau2), df, pairs, trim)


FAR = 3.0  # a pair this many robust spreads (MAD x 1.4826) from its round's median is far out


def one_sided_outliers(rounds: Sequence[Sequence[float]]) -> bool:
    """The far pairs lean to one side beyond chance (two-sided binomial test at 1%; eight far pairs at least)."""
    above = below = 0
    for ratios in rounds:
        if len(ratios) < 5:
            continue
        centre = median(ratios)
        spread = 1.4826 * median([abs(x - centre) for x in ratios])
        above += sum(x > centre + FAR * spread for x in ratios)
        below += sum(x < centre - FAR * spread for x in ratios)
    far = above + below
    if far < 8:
        return False
    tail = sum(math.comb(far, k) for k in range(min(above, below) + 1)) / 2 ** far
    return 2 * tail < 0.01


def _trimmed(ratios: list[float], trim: float) -> tuple[float, float, int]:
    """A round's trimmed mean, the variance that makes its standard error (the winsorized variance over the kept
    share squared, Tukey and McLaughlin) and the pairs kept. A pair that another process's burst of work hit
    lands far out on either side, equally often: trimming keeps the centre where it is and the interval narrow."""
    n = len(ratios)
    cut = int(trim * n)
    kept = ratios[cut:n - cut]
    low, high = kept[0], kept[-1]
    winsorized = [min(max(x, low), high) for x in ratios]
    centre = sum(winsorized) / n
    spread = sum((x - centre) ** 2 for x in winsorized) / (n - 1) if n > 1 else 0.0
    return sum(kept) / len(kept), spread / (len(kept) / n) ** 2, len(kept)


def _between_rounds(rounds: list[list[float]], means: list[float], within: float) -> float:
    """DerSimonian-Laird: the variance of the rounds' means beyond what their pairs' spread explains (0 when not
    seen, or with one round, where it cannot be)."""
    if len(rounds) < 2:
        return 0.0
    w = [len(r) / within for r in rounds]
    fixed = sum(wi * m for wi, m in zip(w, means)) / sum(w)
    q = sum(wi * (m - fixed) ** 2 for wi, m in zip(w, means))
    scale = sum(w) - sum(wi * wi for wi in w) / sum(w)
    return max(0.0, (q - (len(rounds) - 1)) / scale) if scale > 0 else 0.0


def _satterthwaite(rounds: list[list[float]], within: float, within_df: int, tau2: float) -> float:
    """Degrees of freedom of the mean's variance: the pairs' (within rounds, the trimmed ones not counted) and,
    when processes' luck was seen, the rounds' own (one fewer than the rounds)."""
    pairs = sum(len(r) for r in rounds)
    k = len(rounds)
    parts = [(within / pairs, within_df)]
    if tau2 > 0:
        parts.append((tau2 / k, k - 1))
    total = sum(v for v, _ in parts)
    return total ** 2 / sum(v ** 2 / df for v, df in parts)


def verdict(ci: tuple[float, float]) -> str:
    """For step time: slower when the interval lies above 1.0, faster below; undecided when it is too wide to
    tell a 2x gain from a 2x loss."""
    lo, hi = ci
    if lo > 1.0:
        return Verdict.SLOWER
    if hi < 1.0:
        return Verdict.FASTER
    return Verdict.UNDECIDED if hi / lo >= UNDECIDED_WIDTH else Verdict.NO_CHANGE


FAIL, PASS, UNDECIDED = "fail", "pass", "undecided"


def gate_decision(ci: tuple[float, float], allowed_slowdown_pct: float) -> str:
    """fail: even the interval's fast end is slower than allowed; pass: even its slow end is within the allowance;
    undecided: the allowance lies inside the interval (more pairs would be needed)."""
    limit = 1.0 + allowed_slowdown_pct / 100.0
    if ci[0] > limit:
        return FAIL
    if ci[1] < limit:
        return PASS
    return UNDECIDED


PRECISION = 0.02  # with no gate: the pairs stop once the interval's half-width is within 2% (log scale)


def decided(found: Interval, allowed_slowdown_pct: Optional[float]) -> bool:
    if allowed_slowdown_pct is not None:
        return gate_decision(found.ci, allowed_slowdown_pct) != UNDECIDED
    return math.log(found.ci[1] / found.ratio) <= PRECISION
