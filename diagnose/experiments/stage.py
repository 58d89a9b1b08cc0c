"""The experiments stage: try the recommended optimizations on the unchanged script and keep only verified
speedups. Input: the capture, analysis and findings; output: Experiment records and the Headline."""
from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

from diagnose.experiments.diffs import change_text
from diagnose.experiments.memory_fit import (
    MEMORY_LEVERS,
    batch_search_needed,
    fit_out_of_memory,
    largest_batch,
    search_limit,
)
from diagnose.experiments.plan import (
    Candidate,
    covered,
    expected_gains,
    order_candidates,
    plan_sentence,
    rest_command,
    run_estimate_s,
)
from diagnose.experiments.records import failure_text, setting_label, skipped_experiment
from diagnose.experiments.same_data import DIFFERENT, SAME_SAMPLES, SAME_SEQUENCE, DataCheck, check_variant
from diagnose.experiments.scheduler import Arm, ExperimentsInterrupted, Scheduler, arms_for
from diagnose.experiments.trials import Trials, metric_of
from diagnose.experiments.undecided import undecided_cause
from diagnose.formatting import fmt_gib
from diagnose.model import (
    MEASURED,
    Analysis,
    BatchSearch,
    BudgetReport,
    Capture,
    Change,
    Experiment,
    Finding,
    Headline,
    Status,
    Verdict,
)
from diagnose.optimizations import REGISTRY
from diagnose.optimizations.base import DYNAMICS, IDENTICAL, Context
from diagnose.verdict.run_cost import energy_ratio
from diagnose.verdict.stats import Noise, compare, geometric_mean, loss_drift

IDENTICAL_TOLERANCE = 1e-3
BUDGET_REASON = "not run: the experiment budget (--budget-seconds) ran out"
INTERRUPTED_REASON = "not run: the experiments were interrupted (Ctrl-C)"
TOO_SMALL_REASON = "not run: the budget (--budget-seconds) fits fewer than two runs of the baseline and of a setting"


def select(selection: str, findings: list[Finding]) -> list[str]:
    if selection == "none":
        return []
    if selection == "all":
        return list(REGISTRY)
    if selection == "findings":
        return list(dict.fromkeys(o for f in findings for o in f.optimizations))
    return list(dict.fromkeys(selection.split(",")))


@dataclass(frozen=True)
class Outcome:
    experiments: tuple[Experiment, ...]
    headline: Optional[Headline] = None
    interrupted: bool = False  # Ctrl-C cut the experiments short: what was measured is kept
    budget: Optional[BudgetReport] = None
    batch_search: Optional[BatchSearch] = None


def run_experiments(selection: str, capture: Capture, analysis: Analysis, findings: list[Finding], run_dir: Path,
                    budget_s: float, on_progress: Callable[[str], None],
                    on_message: Callable[[str], None] = lambda text: None) -> Outcome:
    """Plan the budget (most promising first), get verdicts one candidate at a time, then combine the winners.
    A run that ran out of memory gets the memory levers instead (memory_fit.py)."""
    ctx = Context(capture, analysis)
    ids = select(selection, findings)
    if capture.status == Status.OUT_OF_MEMORY:
        return _fit_out_of_memory(selection, ids, ctx, run_dir, budget_s, on_progress, on_message)
    if not ids:
        return Outcome(())
    skipped = [skipped_experiment(i, REGISTRY[i].skip_reason(ctx)) for i in ids if REGISTRY[i].skip_reason(ctx)]
    gains = expected_gains(findings)
    if not [i for i in ids if not REGISTRY[i].skip_reason(ctx)]:
        return Outcome(tuple(skipped))  # nothing to measure: no baseline, no ceiling either
    scheduler = Scheduler(capture.script, capture.script_args, run_dir, ctx, budget_s, on_progress)
    run_s = scheduler.first_estimate_s = run_estimate_s(capture, analysis, scheduler.window_s())
    search = None
    if "batch_size" in ids and not REGISTRY["batch_size"].skip_reason(ctx):
        search, ctx, interrupted = _search_batch(scheduler, ctx, on_message)
        if interrupted:
            return Outcome(tuple(skipped), None, True)
        if REGISTRY["batch_size"].skip_reason(ctx):  # no larger batch fits
            skipped.append(skipped_experiment("batch_size", REGISTRY["batch_size"].skip_reason(ctx)))
    candidates = order_candidates([Candidate(i, arms_for(i, ctx), gains.get(i, 0.0)) for i in ids
                                   if not REGISTRY[i].skip_reason(ctx)])
    if not candidates:
        return Outcome(tuple(skipped), batch_search=search)
    plan_s = scheduler.remaining_s()  # what the batch search left
    riders = [i for i in ids if REGISTRY[i].skip_reason(ctx) and REGISTRY[i].rides_with and REGISTRY[i].rides(ctx)]
    chosen = covered(candidates, plan_s, run_s, combine=bool(riders))
    # the plan's first (a sweep trimmed to what fits), then the rest should the runs prove cheaper than estimated
    order = chosen + [c for c in candidates if c.optimization not in {k.optimization for k in chosen}]
    on_message(plan_sentence(plan_s, run_s, chosen, candidates, combine=bool(riders)))
    if not chosen:
        results = [_result(arm, Arm("baseline", {}, ()), ctx, unrun_reason=TOO_SMALL_REASON)
                   for c in candidates for arm in c.arms]
        budget = BudgetReport(budget_s=budget_s, run_estimate_s=run_s, planned=(), decided=(),
                              untried=tuple(c.optimization for c in candidates), too_small=True,
                              rest_command=rest_command(capture, candidates, run_s))
        return Outcome(tuple(results + skipped), None, False, budget, search)
    trials = Trials(scheduler, Arm("baseline", {}, ()))
    try:
        if trials.start():
            trials.decide_in_budget(order, keep_for_combination=True, riders=bool(riders))
    except (ExperimentsInterrupted, KeyboardInterrupt):  # keep what was measured; no combination, no ceiling
        results = list(_results(candidates, trials, ctx, INTERRUPTED_REASON).values())
        return Outcome(tuple(results + skipped), None, True, _report(budget_s, chosen, candidates, results, scheduler),
                       search)
    if not trials.baseline.ok_runs():  # every baseline run failed: nothing could be compared, and that is why
        reason = f"not run: the baseline (the unchanged script) failed: {failure_text(trials.baseline.runs[-1])}"
        results = list(_results(candidates, trials, ctx, reason).values())
        return Outcome(tuple(results + skipped), None, False, _report(budget_s, chosen, candidates, results, scheduler),
                       search)
    verdicts = _results(candidates, trials, ctx)
    results = list(verdicts.values())
    interrupted = False
    try:
        headline, extra = _combine_and_ceiling(trials, order, verdicts, ctx, riders)
    except (ExperimentsInterrupted, KeyboardInterrupt):
        headline, extra, interrupted = None, [], True
    budget = _report(budget_s, chosen, candidates, results, scheduler)
    return Outcome(tuple(results + extra + skipped), headline, interrupted, budget, search)


def _search_batch(scheduler: Scheduler, ctx: Context,
                  on_message: Callable[[str], None]) -> tuple[Optional[BatchSearch], Context, bool]:
    """The largest batch that fits, when the largest batch_size setting might not; the context then carries it,
    so the batch_size settings stop there. The last: interrupted (Ctrl-C)."""
    limit, source = search_limit(ctx, scheduler)
    if not batch_search_needed(ctx, limit):
        return None, ctx, False
    on_message(f"Searching the largest batch that fits in {fmt_gib(limit)} ({source}) with short runs.")
    try:
        search = largest_batch(scheduler, ctx, fits_at_start=True)
    except (ExperimentsInterrupted, KeyboardInterrupt):
        return None, ctx, True
    found = search.recommended if search is not None else None
    return search, (Context(ctx.capture, ctx.analysis, found) if found else ctx), False


def _fit_out_of_memory(selection: str, ids: list[str], ctx: Context, run_dir: Path, budget_s: float,
                       on_progress: Callable[[str], None], on_message: Callable[[str], None]) -> Outcome:
    if selection == "none":
        return Outcome(())
    capture = ctx.capture
    scheduler = Scheduler(capture.script, capture.script_args, run_dir, ctx, budget_s, on_progress)
    scheduler.first_estimate_s = run_estimate_s(capture, ctx.analysis, scheduler.window_s())
    on_message(f"Ran out of memory: trying what makes it fit (of {', '.join(MEMORY_LEVERS)}) under the same "
               f"limit, within {budget_s:.0f} s.")
    fit = fit_out_of_memory(scheduler, ctx, None if selection in ("findings", "all") else ids)
    return Outcome(fit.experiments, fit.headline, fit.interrupted, None, fit.batch_search)


def _results(candidates: list[Candidate], trials: Trials, ctx: Context,
             unrun_reason: str = BUDGET_REASON) -> dict[Arm, Experiment]:
    """Each setting's result, keyed by its arm (in the candidates' order)."""
    noise = trials.noise()
    return {arm: _result(arm, trials.baseline, ctx, unrun_reason=unrun_reason, noise=noise, dropped=arm.dropped)
            for candidate in candidates for arm in candidate.arms}


def _report(budget_s: float, chosen: list[Candidate], candidates: list[Candidate], results: list[Experiment],
            scheduler: Scheduler) -> BudgetReport:
    # a setting that failed has its verdict too: more budget would not help it
    decided = {r.optimization for r in results if r.verdict in MEASURED | {Verdict.FAILED, Verdict.FLAGGED}}
    untried = [c for c in candidates if c.optimization not in decided]
    run_s = scheduler.estimate_s(Arm("baseline", {}, ()))  # one run, as measured by now
    return BudgetReport(budget_s=budget_s, run_estimate_s=run_s, planned=tuple(c.optimization for c in chosen),
                        decided=tuple(c.optimization for c in candidates if c.optimization in decided),
                        untried=tuple(c.optimization for c in untried), runs=scheduler.count,
                        spent_s=scheduler.elapsed_s(), rest_command=rest_command(scheduler.ctx.capture, untried, run_s))


def _result(arm: Arm, baseline: Arm, ctx: Context, metric: Optional[str] = None,
            unrun_reason: str = BUDGET_REASON, noise: Optional[Noise] = None, dropped: str = "") -> Experiment:
    metric = metric or metric_of(arm)
    fidelity = REGISTRY[arm.optimization].fidelity if arm.optimization in REGISTRY else _combined_fidelity(arm)
    common = dict(optimization=arm.optimization, setting=arm.setting, metric=metric, fidelity=fidelity,
                  runs=len(arm.runs), applied=arm.runs[0].applied if arm.runs else (),
                  changes=tuple(c for c in arm.changes if c.id != "ceiling"))
    if not arm.runs:
        return Experiment(**common, speedup=None, ci=None, verdict=Verdict.SKIPPED, loss_drift=None,
                          peak_memory_bytes=None, reason=unrun_reason)
    ok = arm.ok_runs()
    peak = max((m.peak_memory_bytes for m in arm.runs if m.peak_memory_bytes), default=None)
    common["baseline_peak_memory_bytes"] = max((m.peak_memory_bytes for m in baseline.runs if m.peak_memory_bytes),
                                               default=None)
    if not ok:
        return Experiment(**common, speedup=None, ci=None, verdict=Verdict.FAILED, loss_drift=None,
                          peak_memory_bytes=peak, reason=failure_text(arm.runs[-1]))
    base_values, values = baseline.throughputs(metric), arm.throughputs(metric)
    if len(ok) < 2:
        return Experiment(**common, speedup=None, ci=None, verdict=Verdict.SKIPPED, loss_drift=None,
                          peak_memory_bytes=peak, reason=dropped or _one_run_reason(arm, unrun_reason))
    if len(base_values) < 2:
        return Experiment(**common, speedup=None, ci=None, verdict=Verdict.SKIPPED, loss_drift=None,
                          peak_memory_bytes=peak,
                          reason=f"nothing to compare with: fewer than two baseline runs measured {metric} "
                                 f"({failure_text(baseline.runs[-1]) if baseline.runs else 'none ran'})")
    if len(values) < 2:
        return Experiment(**common, speedup=None, ci=None, verdict=Verdict.FAILED, loss_drift=None,
                          peak_memory_bytes=peak, reason=_too_few_windows(arm, metric))
    comparison = compare(base_values, values, noise)
    drift = _drift(baseline, arm)
    data = _data_check(baseline, arm, ctx)
    common["fidelity"] = _checked_fidelity(fidelity, data)
    verdict, reason = comparison.verdict, _reason(comparison.verdict, arm)
    # an interval that decides nothing says what the timed windows show could have widened it
    undecided = undecided_cause(baseline.ok_runs(), ok) if verdict == Verdict.UNDECIDED else None
    if undecided is not None:
        reason = f"{reason}: {undecided.detail}"
    reason += _losses_unchecked(baseline)
    # the same samples in another order give another loss per step: the data check stands in for the loss's
    warning = _fidelity_warning(fidelity, drift if data.verdict != SAME_SAMPLES else None)
    if data.verdict == DIFFERENT:
        verdict, warning = Verdict.FLAGGED, f"fed other data than the baseline: {data.detail}"
        reason = (f"measured {comparison.speedup:.2f}x {metric}, but not a speedup: the variant trained on other "
                  "data than the baseline (see fidelity)")
        undecided = None
    mfu_before = _baseline_mfu(baseline, ctx)
    return Experiment(**common, speedup=comparison.speedup, ci=comparison.ci, verdict=verdict,
                      loss_drift=drift, peak_memory_bytes=peak, reason=reason, mfu_before=mfu_before,
                      mfu_after=mfu_before * comparison.speedup if mfu_before and comparison.speedup else None,
                      first_step_s=ok[0].startup_s,  # to the first step: start-up, worker start, compilation
                      baseline_first_step_s=baseline.ok_runs()[0].startup_s if baseline.ok_runs() else None,
                      change=change_text(arm.changes, ctx), fidelity_warning=warning, data_check=data.verdict,
                      data_check_detail=data.detail, fingerprint_step_s=_fingerprint_step_s(arm),
                      energy_ratio=energy_ratio(baseline.ok_runs(), ok, metric),
                      compile_s=_median_compile_s(ok), baseline_compile_s=_median_compile_s(baseline.ok_runs()),
                      undecided_cause=undecided.cause if undecided is not None else "",
                      timed_over=_timed_over(baseline.ok_runs() + ok))


def _timed_over(runs) -> str:
    """whole-epochs when every timed window of the comparison spans whole epochs, start-ups included (the claim is
    what a long run pays), steady-steps otherwise."""
    windows = [w for m in runs for w in m.windows]
    if not windows:
        return ""
    return "whole-epochs" if all(w.restarts_included for w in windows) else "steady-steps"


def _median_compile_s(runs) -> Optional[float]:
    seconds = [m.compile_s for m in runs if m.compile_s is not None]
    return statistics.median(seconds) if seconds else None


def _baseline_mfu(baseline: Arm, ctx: Context) -> Optional[float]:
    """The baseline runs' FLOP/s (the step's FLOPs x their steps/s) over the fastest dtype's peak."""
    light = ctx.analysis.speed_of_light if ctx.analysis is not None else None
    rates = baseline.throughputs("steps/s")
    if light is None or light.best is None or not rates:
        return None
    return light.flops.per_step * geometric_mean(rates) / light.best.per_s


def _data_check(baseline: Arm, arm: Arm, ctx: Context) -> DataCheck:
    if arm.optimization == "ceiling":
        return DataCheck("", "")  # replays the first batch by design: the time without data loading
    loader = ctx.loader
    epoch_samples = loader.dataset_len if loader is not None and loader.dataset_kind == "map" else None
    return check_variant([m.fed for m in baseline.ok_runs()], [m.fed for m in arm.ok_runs()], _random_items(ctx),
                         epoch_samples)


def _random_items(ctx: Context) -> Optional[str]:
    probe = ctx.capture.dataset_probe
    if probe is not None and probe.deterministic is False:
        return "the dataset returns random items (the same item fetched twice differed: augmentation?)"
    return None


def _checked_fidelity(declared: str, data: DataCheck) -> str:
    """`identical` only when the variant fed what the baseline fed; other data is `different-data` whatever the
    optimization promised."""
    if data.verdict == DIFFERENT:
        return "different-data"
    if declared == IDENTICAL and data.verdict not in (SAME_SEQUENCE, SAME_SAMPLES):
        return "unverified"
    return declared


def _fingerprint_step_s(arm: Arm) -> Optional[float]:
    runs = [m.fed for m in arm.ok_runs() if m.fed.batches]
    return sum(f.hash_s / f.batches for f in runs) / len(runs) if runs else None


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
        return f"only one of {len(arm.runs)} runs reached a timed window; the other: {failure_text(failed[-1])}"
    if unrun_reason == INTERRUPTED_REASON:
        return "only one run before the experiments were interrupted (Ctrl-C): no interval without a second one"
    return "only one run fitted in the budget: no interval without a second one"


def _too_few_windows(arm: Arm, metric: str) -> str:
    if any(m.status == Status.SCRIPT_FINISHED for m in arm.runs):
        steps = max(m.steps_seen for m in arm.runs)
        return (f"the script finished its epochs after {steps} steps, before two timed windows: "
                "give it more epochs or data to measure this setting")
    return f"too few timed windows to compare ({metric} unknown for this script?)"


def _losses_unchecked(baseline: Arm) -> str:
    """A baseline whose loss is NaN or inf trains nothing: its losses cannot say whether a change kept training."""
    runs = baseline.ok_runs()
    if runs and any(not math.isfinite(x) for x in runs[0].losses):
        return "; losses not compared: the baseline's loss is not finite (the run is not training)"
    return ""


def _reason(verdict: str, arm: Arm) -> str:
    if verdict == Verdict.FASTER:
        return f"verified over {len(arm.ok_runs())} runs interleaved with the baseline: the 99% interval lies above 1.0"
    if verdict == Verdict.SLOWER:
        return "slower on this machine: the 99% interval lies below 1.0"
    if verdict == Verdict.UNDECIDED:  # the cause follows (undecided.py)
        return "undecided: the 99% interval is too wide to tell a 2x gain from a 2x loss"
    return "no measurable change: the 99% interval includes 1.0"


def _combined_fidelity(arm: Arm) -> str:
    kinds = {REGISTRY[c.id].fidelity for c in arm.changes if c.id in REGISTRY}
    for kind in (DYNAMICS, "approximate", IDENTICAL):
        if kind in kinds:
            return kind
    return ""


def _winners(best: list[Arm], verdicts: dict[Arm, Experiment]) -> list[Arm]:
    """Best setting of each optimization that was verified faster, dropping the weaker of conflicting pairs."""
    faster = [a for a in best if verdicts[a].verdict == Verdict.FASTER]
    faster.sort(key=lambda a: verdicts[a].speedup or 0, reverse=True)
    chosen: list[Arm] = []
    for arm in faster:
        if not any(arm.optimization in REGISTRY[c.optimization].conflicts_with
                   or c.optimization in REGISTRY[arm.optimization].conflicts_with for c in chosen):
            chosen.append(arm)
    return chosen


def _combine_and_ceiling(trials: Trials, candidates: list[Candidate], verdicts: dict[Arm, Experiment], ctx: Context,
                         riders: list[str]) -> tuple[Optional[Headline], list[Experiment]]:
    """All winners together (the headline; a single winner without riders is its own combination, its runs
    reused), then, budget allowing, the ceiling: the step time with no data loading."""
    best = [_best_arm(c, verdicts) for c in candidates]
    winners = _winners([a for a in best if a is not None], verdicts)
    combined = _combined_arm(winners, riders, ctx)
    if combined is not None and len(combined.changes) > 1:
        trials.decide_in_budget([Candidate("combined", [combined], 1.0)])
    elif combined is not None:  # the single winner's configuration: its own runs, no new ones
        combined.runs[:], combined.run_dirs[:] = winners[0].runs, winners[0].run_dirs
    ceiling = None
    if ctx.loader is not None and (ctx.metric("data_wait_frac") or 0) >= 0.05:
        ceiling = Arm("ceiling", {}, (Change("ceiling"),))
        trials.decide_in_budget([Candidate("ceiling", [ceiling], 0.0)])
    noise = trials.noise()
    combined_result = _result(combined, trials.baseline, ctx, noise=noise) if combined else None
    ceiling_result = _ceiling_result(ceiling, trials.baseline, ctx, noise) if ceiling else None
    extra = [r for r in (combined_result, ceiling_result) if r is not None]
    if combined is not None and not combined.runs and winners:  # the budget left no runs for them together:
        top = max(winners, key=lambda a: verdicts[a].speedup or 0.0)  # the headline is the best one verified
        return _headline([top], verdicts[top], ceiling_result), extra
    return _headline(winners, combined_result, ceiling_result), extra


def _best_arm(candidate: Candidate, verdicts: dict[Arm, Experiment]) -> Optional[Arm]:
    """The setting of a candidate that reached a verdict (a sweep's survivor), ranked as the sweep ranks."""
    decided = [a for a in candidate.arms if verdicts[a].verdict in MEASURED]
    return max(decided, key=lambda a: geometric_mean(a.throughputs(metric_of(a))), default=None)


def _combined_arm(winners: list[Arm], riders: list[str], ctx: Context) -> Optional[Arm]:
    if not winners:
        return None
    joining = [(r, REGISTRY[r].settings(ctx)[0]) for r in riders
               if REGISTRY[r].rides_with in {a.optimization for a in winners}]
    changes = tuple(c for arm in winners for c in arm.changes) + tuple(Change(r, s) for r, s in joining)
    labels = [a.label for a in winners] + [setting_label(r, s) for r, s in joining]
    return Arm("combined", {"changes": labels}, changes, max(a.extra_warmup for a in winners),
               _combined_burst(winners), unique_data=any(a.unique_data for a in winners))


def _combined_burst(winners: list[Arm]) -> Optional[int]:
    bursts = [a.burst_steps for a in winners if a.burst_steps is not None]
    return max(bursts) if bursts else None


def _ceiling_result(ceiling: Arm, baseline: Arm, ctx: Context, noise: Optional[Noise]) -> Experiment:
    result = _result(ceiling, baseline, ctx, "steps/s", noise=noise)
    from dataclasses import replace

    measured = result.verdict in MEASURED  # else keep why it was not measured
    return replace(result, fidelity="", change="", fidelity_warning="", loss_drift=None, reason=(
        "the same first batch replayed from memory: the step time with no data loading at all" if measured
        else result.reason))


def _headline(winners: list[Arm], combined: Optional[Experiment], ceiling: Optional[Experiment]) -> Optional[Headline]:
    if combined is None:
        if ceiling is None:
            return None
        return Headline(changes=(), speedup=None, ci=None, verdict=Verdict.NO_CHANGE, metric="steps/s",
                        data_loading_recovered_frac=None,
                        ceiling_speedup=ceiling.speedup if ceiling.verdict == Verdict.FASTER else None)
    verified_ceiling = ceiling is not None and ceiling.verdict == Verdict.FASTER and ceiling.speedup
    recovered = None
    if verified_ceiling and combined.verdict == Verdict.FASTER and combined.speedup and combined.metric == "steps/s":
        # share of the time that data loading cost (baseline step - ceiling step) the fixes won back; above 100%
        # when the fixes also sped up more than data loading (e.g. caching skips preprocessing the ceiling keeps)
        recovered = min((1 - 1 / combined.speedup) / (1 - 1 / ceiling.speedup), 1.0)
    changes = tuple(combined.setting.get("changes", ())) or tuple(a.label for a in winners)  # riders included
    return Headline(changes=changes, speedup=combined.speedup, ci=combined.ci, verdict=combined.verdict,
                    metric=combined.metric, data_loading_recovered_frac=recovered,
                    ceiling_speedup=ceiling.speedup if verified_ceiling else None)
