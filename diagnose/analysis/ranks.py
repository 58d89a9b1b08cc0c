"""Several traces of one job (one per rank): a summary row per rank, and which rank the diagnosis is about."""
from __future__ import annotations

from dataclasses import replace
from typing import Optional

from diagnose.model import Analysis, RankSummary
from diagnose.trace import Trace

STRAGGLER_SPREAD = 0.10  # ranks' shares of step time in collectives differ by at least this much


def rank_of(trace: Trace, fallback: int) -> int:
    """The rank the trace says it is (distributedInfo), else its position among the files given."""
    info = trace.metadata.get("distributedInfo") or {}
    rank = info.get("rank") if isinstance(info, dict) else None
    return int(rank) if isinstance(rank, (int, float)) and not isinstance(rank, bool) else fallback


def summary(rank: int, path: str, analysis: Analysis) -> RankSummary:
    m = analysis.metrics
    return RankSummary(rank=rank, trace=path, step_time_s=analysis.step_time_s.get("mean", 0.0),
                       breakdown=dict(analysis.breakdown), collective_wait_frac=m.get("collective_wait_frac"),
                       gpu_busy_frac=m.get("gpu_busy_frac"), data_wait_frac=m.get("data_wait_frac"),
                       communication_frac=m.get("communication_frac"), allreduces_per_step=m.get("allreduces_per_step"),
                       step_times_s=tuple(s.duration_s for s in analysis.steps))


def straggler(ranks: list[RankSummary]) -> Optional[RankSummary]:
    """The rank the others wait for: it spends the least of its step in collectives, clearly less than the
    rank that waits most (a rank that arrives last at an all-reduce waits least in it)."""
    waits = [r for r in ranks if r.collective_wait_frac is not None]
    if len(waits) < 2:
        return None
    least = min(waits, key=lambda r: r.collective_wait_frac)
    most = max(waits, key=lambda r: r.collective_wait_frac)
    return least if most.collective_wait_frac - least.collective_wait_frac >= STRAGGLER_SPREAD else None


def combine(analyses: list[tuple[int, str, Analysis]]) -> tuple[int, Analysis]:
    """The analysis the diagnosis is about (the straggler's when one rank holds the others back, else the
    lowest rank's), with every rank's summary and the job-level metrics added."""
    ranks = sorted((summary(r, p, a) for r, p, a in analyses), key=lambda s: s.rank)
    slow = straggler(ranks)
    chosen_rank = slow.rank if slow else ranks[0].rank
    chosen = next(a for r, _, a in analyses if r == chosen_rank)
    waits = [r.collective_wait_frac for r in ranks if r.collective_wait_frac is not None]
    extra = {
        "rank_count": float(len(ranks)),
        "rank": float(chosen_rank),
        "straggler_rank": float(slow.rank) if slow else None,
        "collective_wait_spread": max(waits) - min(waits) if len(waits) > 1 else None,
        "collective_wait_max_frac": max(waits) if waits else None,
        "step_time_spread": _spread([r.step_time_s for r in ranks]),
        "straggler_compute_ratio": _compute_ratio(slow, ranks),
    }
    return chosen_rank, replace(chosen, ranks=tuple(ranks), metrics={**chosen.metrics, **extra})


def _spread(values: list[float]) -> Optional[float]:
    """(slowest - fastest) / fastest."""
    if len(values) < 2 or min(values) <= 0:
        return None
    return (max(values) - min(values)) / min(values)


def _compute_ratio(slow: Optional[RankSummary], ranks: list[RankSummary]) -> Optional[float]:
    """The straggler's compute seconds per step over the other ranks' mean: well above 1 with the same work per rank,
    its device (or CPU) computes slower (throttled, shared, another model)."""
    if slow is None:
        return None
    others = [r.breakdown.get("compute", 0.0) * r.step_time_s for r in ranks if r.rank != slow.rank]
    mean = sum(others) / len(others) if others else 0.0
    return slow.breakdown.get("compute", 0.0) * slow.step_time_s / mean if mean > 0 else None
