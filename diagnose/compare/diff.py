"""B against A: step time, breakdown, phases, the ops and kernels that moved, findings, environment."""
from __future__ import annotations

from dataclasses import replace
from typing import Optional

from diagnose.compare.interval import gate, step_change
from diagnose.compare.optable import Amount
from diagnose.compare.run_cost import run_cost_change
from diagnose.compare.sides import LoadedSide, same_script
from diagnose.errors import UserError
from diagnose.formatting import fmt_ms
from diagnose.model import BUCKETS, PHASES, AmountChange, Comparison, FindingChange, Verdict

TOP_CHANGES = 12  # ops and kernels listed, most changed first
MIN_CHANGE_FRAC = 0.002  # of the slower side's step time: smaller moves are not listed


def compare_sides(a: LoadedSide, b: LoadedSide, *, force: bool = False, fail_if_slower_pct: Optional[float] = None,
                  run_noise_pct: Optional[float] = None) -> Comparison:
    _check_comparable(a, b, force)
    a, b, same_basis = _same_basis(a, b)
    step = step_change(a.side, b.side, run_noise_pct / 100 if run_noise_pct is not None else None)
    scale = max(a.side.profiled_step_s, b.side.profiled_step_s)
    return Comparison(
        schema=1, a=a.side, b=b.side, step=step, buckets=_buckets(a, b), phases=_phases(a, b),
        ops=_most_changed(_match_ops(a.profile.ops, b.profile.ops), scale),
        kernels=_most_changed({(k, ""): v for k, v in _pairs(a.profile.kernels, b.profile.kernels).items()}, scale),
        findings=_findings(a, b), environment_changes=_environment_changes(a, b),
        gate=gate(step, fail_if_slower_pct) if fail_if_slower_pct is not None else None,
        notes=_notes(a, b, same_basis, gated=fail_if_slower_pct is not None), run_cost=run_cost_change(a, b, step))


def _check_comparable(a: LoadedSide, b: LoadedSide, force: bool) -> None:
    if not force and not same_script(a.side.script, b.side.script):
        raise UserError(f"A and B ran different scripts ({a.side.script} and {b.side.script})",
                        "compare runs of one script; pass --force to compare them anyway")


def _same_basis(a: LoadedSide, b: LoadedSide) -> tuple[LoadedSide, LoadedSide, bool]:
    """A run's unprofiled step time against a trace's profiled one would mostly measure the profiler: when one side
    has no unprofiled time, both use their profiled steps."""
    if a.side.step_basis == b.side.step_basis:
        return a, b, True
    return _profiled(a), _profiled(b), False


def _profiled(side: LoadedSide) -> LoadedSide:
    steps = len(side.analysis.steps)
    return replace(side, side=replace(side.side, step_s=side.side.profiled_step_s, step_basis="profiled", steps=steps))


def _buckets(a: LoadedSide, b: LoadedSide) -> tuple[AmountChange, ...]:
    def seconds(side: LoadedSide, bucket: str) -> float:
        return side.analysis.breakdown.get(bucket, 0.0) * side.side.profiled_step_s

    rows = (AmountChange(bucket, seconds(a, bucket), seconds(b, bucket)) for bucket in BUCKETS)
    return tuple(r for r in rows if r.a > 0 or r.b > 0)


def _phases(a: LoadedSide, b: LoadedSide) -> tuple[AmountChange, ...]:
    if not a.analysis.phases and not b.analysis.phases:
        return ()
    a_stats = {p.phase: p for p in a.analysis.phases}
    b_stats = {p.phase: p for p in b.analysis.phases}
    rows = []
    for phase in PHASES:
        pa, pb = a_stats.get(phase), b_stats.get(phase)
        if pa is None and pb is None:
            continue
        rows.append(AmountChange(phase, pa.gpu_busy_s_per_step if pa else 0.0, pb.gpu_busy_s_per_step if pb else 0.0,
                                 a_calls=pa.launches_per_step if pa else 0.0,
                                 b_calls=pb.launches_per_step if pb else 0.0))
    return tuple(rows)


def _pairs(a: dict, b: dict) -> dict:
    none = Amount(0.0, 0.0)
    return {key: (a.get(key, none), b.get(key, none)) for key in {*a, *b}}


def _match_ops(a: dict[tuple[str, str], Amount], b: dict[tuple[str, str], Amount]) -> dict:
    """Ops matched by name and input shapes; those whose shapes changed (a new batch size) by name alone."""
    pairs = {key: pair for key, pair in _pairs(a, b).items() if key in a and key in b}
    lone_a = _by_name({k: v for k, v in a.items() if k not in b})
    lone_b = _by_name({k: v for k, v in b.items() if k not in a})
    none = Amount(0.0, 0.0)
    matched_names = {name for name, _ in pairs}
    for name in {*lone_a, *lone_b}:
        both = name in lone_a and name in lone_b
        # "" would collide with an op that records no shapes; an op kept under other shapes is not "removed"
        detail = "input shapes changed" if both else "other input shapes" if name in matched_names else "(no match)"
        pairs[(name, detail)] = (lone_a.get(name, none), lone_b.get(name, none))
    return pairs


def _by_name(amounts: dict[tuple[str, str], Amount]) -> dict[str, Amount]:
    merged: dict[str, Amount] = {}
    for (name, _), amount in amounts.items():
        before = merged.get(name, Amount(0.0, 0.0))
        merged[name] = Amount(before.seconds + amount.seconds, before.calls + amount.calls)
    return merged


def _most_changed(pairs: dict, step_s: float) -> tuple[AmountChange, ...]:
    rows = []
    for (name, detail), (pa, pb) in pairs.items():
        if abs(pb.seconds - pa.seconds) < MIN_CHANGE_FRAC * step_s and (pa.calls > 0) == (pb.calls > 0):
            continue
        status = ("added" if pa.calls == 0 else "removed" if pb.calls == 0 else
                  Verdict.SLOWER if pb.seconds > pa.seconds else Verdict.FASTER)
        rows.append(AmountChange(name, pa.seconds, pb.seconds, detail, status, pa.calls, pb.calls))
    rows.sort(key=lambda r: abs(r.b - r.a), reverse=True)
    return tuple(rows[:TOP_CHANGES])


def _findings(a: LoadedSide, b: LoadedSide) -> tuple[FindingChange, ...]:
    a_by_rule = {f.rule: f for f in a.findings}
    b_by_rule = {f.rule: f for f in b.findings}
    rows = []
    for rule in [*a_by_rule, *(r for r in b_by_rule if r not in a_by_rule)]:
        fa, fb = a_by_rule.get(rule), b_by_rule.get(rule)
        status = "unchanged" if fa and fb else "resolved" if fa else "new"
        shown = fb or fa
        rows.append(FindingChange(rule, shown.title, status, fa.cost_fraction if fa else None,
                                  fb.cost_fraction if fb else None, shown.category))
    order = {"resolved": 0, "new": 1, "unchanged": 2}
    return tuple(sorted(rows, key=lambda r: order[r.status]))


def _environment_changes(a: LoadedSide, b: LoadedSide) -> tuple[tuple[str, str, str], ...]:
    ea, eb = a.side.environment, b.side.environment
    keys = [*ea, *(k for k in eb if k not in ea)]
    return tuple((k, ea.get(k, "not recorded"), eb.get(k, "not recorded")) for k in keys if ea.get(k) != eb.get(k))


def _notes(a: LoadedSide, b: LoadedSide, same_basis: bool, gated: bool = False) -> tuple[str, ...]:
    notes = []
    if gated:
        notes.append("A and B were measured apart, not interleaved: the interval counts how far separate runs move, "
                     "more than the few percent a gate is for; `diagnose run --baseline-ref REV` (or `compare --live "
                     "A.py B.py`) times both versions in one job, taking turns, and resolves 5%")
    side_of = {"A": a, "B": b}
    for label, side in (("A", a.side), ("B", b.side)):
        if len(side_of[label].analysis.steps) < 2:
            notes.append(f"{label} has one profiled step: its spread between steps is unknown, and the interval "
                         "counts only run-to-run variation for it")
        if side.step_basis == "unprofiled" and side.step_s < side.profiled_step_s / 2:
            notes.append(f"{label}'s steps timed without the profiler ({fmt_ms(side.step_s)}) are less than "
                         f"half its profiled ones ({fmt_ms(side.profiled_step_s)}): with loader workers, a short "
                         "window can draw batches prefetched while the profiler ran, and overstate the speed")
    if not same_basis:
        notes.append("only one side has a step time measured without the profiler: both are compared on their "
                     "profiled steps")
    return tuple(notes)
