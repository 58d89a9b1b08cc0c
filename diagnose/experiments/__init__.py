"""Experiments stage: try the recommended optimizations on the unchanged script and keep only verified
speedups. Input: the capture, analysis and findings; output: Experiment records and the Headline."""
from __future__ import annotations

from pathlib import Path
from typing import Callable, Optional

from diagnose.experiments.diffs import keyword_diff
from diagnose.experiments.runner import CONFIRM_ROUNDS, SCREEN_ROUNDS, Arm, ExperimentsInterrupted, Scheduler, interleave
from diagnose.experiments.runner import arms_for
from diagnose.experiments.stats import compare, loss_drift
from diagnose.model import Analysis, Capture, Change, Experiment, Finding, Headline, Measurement
from diagnose.optimizations import REGISTRY
from diagnose.optimizations.base import DYNAMICS, IDENTICAL, Context
from diagnose.resources import display_location

IDENTICAL_TOLERANCE = 1e-3
BUDGET_REASON = "not run: the experiment budget (--budget-seconds) ran out"
INTERRUPTED_REASON = "not run: the experiments were interrupted (Ctrl-C)"


def select(selection: str, findings: list[Finding]) -> list[str]:
    if selection == "none":
        return []
    if selection == "all":
        return list(REGISTRY)
    if selection == "findings":
        return list(dict.fromkeys(o for f in findings for o in f.optimizations))
    return list(dict.fromkeys(selection.split(",")))


def run_experiments(selection: str, capture: Capture, analysis: Analysis, findings: list[Finding], run_dir: Path,
                    budget_s: float, on_progress: Callable[[str], None]
                    ) -> tuple[list[Experiment], Optional[Headline], bool]:
    """(every setting's result, the headline, whether Ctrl-C cut the experiments short)."""
    ctx = Context(capture, analysis)
    ids = select(selection, findings)
    if not ids:
        return [], None, False
    skipped = [_skipped(i, REGISTRY[i].skip_reason(ctx)) for i in ids if REGISTRY[i].skip_reason(ctx)]
    arms = [arm for i in ids if not REGISTRY[i].skip_reason(ctx) for arm in arms_for(i, ctx)]
    if not arms:
        return skipped, None, False  # nothing to measure: no baseline, no ceiling either
    scheduler = Scheduler(capture.script, capture.script_args, run_dir, ctx, budget_s, on_progress)
    baseline = Arm("baseline", {}, ())
    try:
        for round_ in range(SCREEN_ROUNDS):
            if round_:  # when the budget runs short, the settings that did best so far get their second run first
                arms = sorted(arms, key=lambda a: _mean(a.throughputs(_metric(a.optimization))), reverse=True)
            interleave(scheduler, baseline, arms)
        best = _best_per_optimization(arms, baseline)
        for _ in range(CONFIRM_ROUNDS):
            interleave(scheduler, baseline, best)
    except (ExperimentsInterrupted, KeyboardInterrupt):  # keep what was measured; no combination, no ceiling
        return [_result(arm, baseline, ctx, unrun_reason=INTERRUPTED_REASON) for arm in arms] + skipped, None, True
    results = [_result(arm, baseline, ctx) for arm in arms]
    riders = [i for i in ids if REGISTRY[i].skip_reason(ctx) and REGISTRY[i].rides_with and REGISTRY[i].rides(ctx)]
    try:
        headline, extra = _combine_and_ceiling(scheduler, baseline, best, results, ctx, riders)
    except (ExperimentsInterrupted, KeyboardInterrupt):
        return results + skipped, None, True
    return results + extra + skipped, headline, False


def _metric(optimization: str) -> str:
    return REGISTRY[optimization].metric if optimization in REGISTRY else "steps/s"


def _mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else 0.0


def _best_per_optimization(arms: list[Arm], baseline: Arm) -> list[Arm]:
    best: dict[str, Arm] = {}
    for arm in arms:
        score = _mean(arm.throughputs(_metric(arm.optimization)))
        current = best.get(arm.optimization)
        if score > 0 and (current is None or score > _mean(current.throughputs(_metric(current.optimization)))):
            best[arm.optimization] = arm
    return list(best.values())


def _skipped(optimization: str, reason: str) -> Experiment:
    return Experiment(optimization=optimization, setting={}, metric=_metric(optimization), speedup=None, ci=None,
                      verdict="skipped", loss_drift=None, peak_memory_bytes=None, reason=reason,
                      fidelity=REGISTRY[optimization].fidelity if optimization in REGISTRY else "")


def _result(arm: Arm, baseline: Arm, ctx: Context, metric: Optional[str] = None,
            unrun_reason: str = BUDGET_REASON) -> Experiment:
    metric = metric or _metric(arm.optimization)
    fidelity = REGISTRY[arm.optimization].fidelity if arm.optimization in REGISTRY else _combined_fidelity(arm)
    common = dict(optimization=arm.optimization, setting=arm.setting, metric=metric, fidelity=fidelity,
                  runs=len(arm.runs), applied=arm.runs[0].applied if arm.runs else ())
    if not arm.runs:
        return Experiment(**common, speedup=None, ci=None, verdict="skipped", loss_drift=None,
                          peak_memory_bytes=None, reason=unrun_reason)
    ok = arm.ok_runs()
    peak = max((m.peak_memory_bytes for m in arm.runs if m.peak_memory_bytes), default=None)
    common["baseline_peak_memory_bytes"] = max((m.peak_memory_bytes for m in baseline.runs if m.peak_memory_bytes),
                                               default=None)
    if not ok:
        return Experiment(**common, speedup=None, ci=None, verdict="failed", loss_drift=None, peak_memory_bytes=peak,
                          reason=_failure(arm.runs[-1]))
    base_values, values = baseline.throughputs(metric), arm.throughputs(metric)
    if len(ok) < 2:
        return Experiment(**common, speedup=None, ci=None, verdict="skipped", loss_drift=None, peak_memory_bytes=peak,
                          reason=_one_run_reason(arm, unrun_reason))
    if len(base_values) < 2:
        return Experiment(**common, speedup=None, ci=None, verdict="skipped", loss_drift=None, peak_memory_bytes=peak,
                          reason=f"nothing to compare with: fewer than two baseline runs measured {metric} "
                                 f"({_failure(baseline.runs[-1]) if baseline.runs else 'none ran'})")
    if len(values) < 2:
        return Experiment(**common, speedup=None, ci=None, verdict="failed", loss_drift=None, peak_memory_bytes=peak,
                          reason=_too_few_windows(arm, metric))
    comparison = compare(base_values, values)
    drift = _drift(baseline, arm)
    return Experiment(**common, speedup=comparison.speedup, ci=comparison.ci, verdict=comparison.verdict,
                      loss_drift=drift, peak_memory_bytes=peak, reason=_reason(comparison.verdict, arm),
                      first_step_s=ok[0].startup_s,  # to the first step: start-up, worker start, compilation
                      baseline_first_step_s=baseline.ok_runs()[0].startup_s if baseline.ok_runs() else None,
                      change=_change(arm, ctx), fidelity_warning=_fidelity_warning(fidelity, drift))


def _drift(baseline: Arm, arm: Arm) -> Optional[float]:
    base, mine = baseline.ok_runs(), arm.ok_runs()
    if not base or not mine:
        return None
    return loss_drift(base[0].losses, mine[0].losses)


def _fidelity_warning(fidelity: str, drift: Optional[float]) -> str:
    if fidelity == IDENTICAL and drift is not None and drift > IDENTICAL_TOLERANCE:
        return f"should keep results identical, but the loss drifted by {drift:.2%} from the baseline"
    return ""


def _one_run_reason(arm: Arm, unrun_reason: str) -> str:
    failed = [m for m in arm.runs if not m.windows]
    if failed:
        return f"only one of {len(arm.runs)} runs reached a timed window; the other: {_failure(failed[-1])}"
    if unrun_reason == INTERRUPTED_REASON:
        return "only one run before the experiments were interrupted (Ctrl-C): no interval without a second one"
    return "only one run fitted in the budget: no interval without a second one"


def _too_few_windows(arm: Arm, metric: str) -> str:
    if any(m.status == "script_finished" for m in arm.runs):
        steps = max(m.steps_seen for m in arm.runs)
        return (f"the script finished its epochs after {steps} steps, before two timed windows: "
                "give it more epochs or data to measure this setting")
    return f"too few timed windows to compare ({metric} unknown for this script?)"


def _failure(m: Measurement) -> str:
    if m.error is not None:
        return f"{m.error.type}: {m.error.message}"
    if m.status == "script_finished":
        return f"the script finished its epochs after {m.steps_seen} steps, before the warm-up ended"
    return f"the run ended with status {m.status} before a timed window"


def _reason(verdict: str, arm: Arm) -> str:
    if verdict == "faster":
        return f"verified over {len(arm.ok_runs())} runs interleaved with the baseline: the 99% interval lies above 1.0"
    if verdict == "slower":
        return "slower on this machine: the 99% interval lies below 1.0"
    return "no measurable change: the 99% interval includes 1.0"


def _change(arm: Arm, ctx: Context) -> str:
    parts = []
    for change in arm.changes:
        optimization = REGISTRY.get(change.id)
        if optimization is None:
            continue
        location = _site_location(optimization.site, ctx)
        # relative to the current folder, as `git apply` wants it (display_location takes path:line)
        name = (display_location(location) or "").rpartition(":")[0].lstrip("/") if location else ""
        diff = keyword_diff(location, optimization.keyword_edits(change.setting), name)
        parts.append(diff or optimization.snippet(change.setting, ctx))
    return "\n".join(p for p in parts if p)


def _site_location(site: Optional[str], ctx: Context) -> Optional[str]:
    if site == "loader" and ctx.loader is not None:
        return ctx.loader.location
    if site == "optimizer" and ctx.capture.optimizers:
        return ctx.capture.optimizers[0].location
    return None


def _combined_fidelity(arm: Arm) -> str:
    kinds = {REGISTRY[c.id].fidelity for c in arm.changes if c.id in REGISTRY}
    for kind in (DYNAMICS, "approximate", IDENTICAL):
        if kind in kinds:
            return kind
    return ""


def _winners(best: list[Arm], results: list[Experiment]) -> list[Arm]:
    """Best setting of each optimization that was verified faster, dropping the weaker of conflicting pairs."""
    verdicts = {(r.optimization, repr(r.setting)): r for r in results}
    faster = [a for a in best if verdicts[(a.optimization, repr(a.setting))].verdict == "faster"]
    faster.sort(key=lambda a: verdicts[(a.optimization, repr(a.setting))].speedup or 0, reverse=True)
    chosen: list[Arm] = []
    for arm in faster:
        if not any(arm.optimization in REGISTRY[c.optimization].conflicts_with
                   or c.optimization in REGISTRY[arm.optimization].conflicts_with for c in chosen):
            chosen.append(arm)
    return chosen


def _combine_and_ceiling(scheduler: Scheduler, baseline: Arm, best: list[Arm], results: list[Experiment],
                         ctx: Context, riders: list[str]) -> tuple[Optional[Headline], list[Experiment]]:
    winners = _winners(best, results)
    extra: list[Experiment] = []
    combined = ceiling = None
    if winners:
        joining = [(r, REGISTRY[r].settings(ctx)[0]) for r in riders
                   if REGISTRY[r].rides_with in {a.optimization for a in winners}]
        changes = tuple(c for arm in winners for c in arm.changes) + tuple(Change(r, s) for r, s in joining)
        labels = [a.label for a in winners] + [_label(r, s) for r, s in joining]
        combined = Arm("combined", {"changes": labels}, changes,
                       max(a.extra_warmup for a in winners), _combined_burst(winners))
    if ctx.loader is not None and (ctx.metric("data_wait_frac") or 0) >= 0.05:
        ceiling = Arm("ceiling", {}, (Change("ceiling"),))
    arms = [a for a in (combined, ceiling) if a is not None]
    for _ in range(SCREEN_ROUNDS + CONFIRM_ROUNDS):  # the headline: as many runs as a confirmed setting
        interleave(scheduler, baseline, arms)
    metric = "samples/s" if any(REGISTRY[c.id].metric == "samples/s" for c in (combined.changes if combined else ())) \
        else "steps/s"
    if combined is not None and len(combined.changes) == 1:  # the single winner's configuration: pool its runs
        combined.runs[:0], combined.run_dirs[:0] = winners[0].runs, winners[0].run_dirs
    combined_result = _result(combined, baseline, ctx, metric) if combined else None
    ceiling_result = _ceiling_result(ceiling, baseline, ctx) if ceiling else None
    extra = [r for r in (combined_result, ceiling_result) if r is not None]
    return _headline(winners, combined_result, ceiling_result), extra


def _label(optimization: str, setting: dict) -> str:
    detail = ", ".join(f"{k}={v}" for k, v in setting.items())
    return f"{optimization}({detail})" if detail else optimization


def _combined_burst(winners: list[Arm]) -> Optional[int]:
    bursts = [a.burst_steps for a in winners if a.burst_steps is not None]
    return max(bursts) if bursts else None


def _ceiling_result(ceiling: Arm, baseline: Arm, ctx: Context) -> Experiment:
    result = _result(ceiling, baseline, ctx, "steps/s")
    from dataclasses import replace

    measured = result.verdict in ("faster", "slower", "no-change")  # else keep why it was not measured
    return replace(result, fidelity="", change="", fidelity_warning="", loss_drift=None, reason=(
        "the same first batch replayed from memory: the step time with no data loading at all" if measured
        else result.reason))


def _headline(winners: list[Arm], combined: Optional[Experiment], ceiling: Optional[Experiment]) -> Optional[Headline]:
    if combined is None:
        if ceiling is None:
            return None
        return Headline((), None, None, "no-change", "steps/s", None,
                        ceiling.speedup if ceiling.verdict == "faster" else None)
    verified_ceiling = ceiling is not None and ceiling.verdict == "faster" and ceiling.speedup
    recovered = None
    if verified_ceiling and combined.verdict == "faster" and combined.speedup and combined.metric == "steps/s":
        # share of the time that data loading cost (baseline step - ceiling step) the fixes won back; above 100%
        # when the fixes also sped up more than data loading (e.g. caching skips preprocessing the ceiling keeps)
        recovered = min((1 - 1 / combined.speedup) / (1 - 1 / ceiling.speedup), 1.0)
    changes = tuple(combined.setting.get("changes", ())) or tuple(a.label for a in winners)  # riders included
    return Headline(changes, combined.speedup, combined.ci, combined.verdict, combined.metric,
                    recovered, ceiling.speedup if verified_ceiling else None)
