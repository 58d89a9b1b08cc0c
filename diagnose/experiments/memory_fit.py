"""Experiments where memory is the limit. A run that ran out of memory has no baseline to be faster than: the
question is which change makes it fit, and at what speed. First what keeps the effective batch, each to a
verdict, run round-robin: gradient accumulation with the fewest micro-batches that fit (halvings by short runs
under the same limit find the first batch that fits), activation checkpointing, mixed precision, and
accumulation with twice as many micro-batches; each fits or runs out of memory again, and the headline is the
fastest that fits. Then, with what the budget leaves, the largest batch that fits (the search's line and
bisection). Runs are as long as their measured steps need. The same search gives the `batch_size` experiment of
a run that fitted its largest setting."""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable, Optional

import psutil

from diagnose.experiments import cost
from diagnose.experiments.batch_search import MARGIN, finish_search, first_fit
from diagnose.experiments.diffs import change_text
from diagnose.experiments.inline_fit import inline_accumulation
from diagnose.experiments.records import failure_text, setting_label, skipped_experiment
from diagnose.experiments.scheduler import Arm, ExperimentsInterrupted, Scheduler, arms_for
from diagnose.formatting import fmt_gib
from diagnose.model import BatchProbe, BatchSearch, Change, Experiment, Headline, Measurement, Status, Verdict
from diagnose.optimizations import REGISTRY
from diagnose.optimizations.base import Context
from diagnose.optimizations.batch_size import FACTORS
from diagnose.verdict.stats import pooled_noise, throughput_interval

MEMORY_LEVERS = ("grad_accumulation", "activation_checkpointing", "amp", "expandable_segments")
SEARCH_FACTOR = max(FACTORS)  # the largest batch_size setting: a search is needed only when it might not fit
# a short run needs three steps: a batch of a quarter of the dataset leaves an epoch room for them
STEPS_PER_EPOCH = 4


@dataclass(frozen=True)
class FitOutcome:
    experiments: tuple[Experiment, ...]
    headline: Optional[Headline]
    batch_search: Optional[BatchSearch]
    interrupted: bool = False  # Ctrl-C: what was measured until then is kept


def search_limit(ctx: Context, scheduler: Scheduler) -> tuple[int, str]:
    """The memory a batch must fit in: the limit that applied to the script (--memory-limit, a ulimit, a cgroup, the
    GPU's), else the GPU's, else what the machine has available."""
    reading = ctx.capture.memory_limit
    if reading is not None and reading.kind != "machine":
        return reading.limit_bytes, reading.source
    if scheduler.memory_limit_bytes:
        return scheduler.memory_limit_bytes, "--memory-limit"
    if ctx.cuda and ctx.capture.memory_capacity_bytes:
        return ctx.capture.memory_capacity_bytes, "the GPU's memory"
    return int(psutil.virtual_memory().available), "the machine's available memory"


def batch_search_needed(ctx: Context, limit_bytes: int) -> bool:
    """Whether the largest batch setting might not fit. Memory is fixed + per-sample x batch, and what grows with
    the batch is tensors: 16x the batch needs at most this run's peak plus 15x its tensors' peak (the whole peak
    when the tensors were not measured). Below the limit every setting fits, and no short run is spent on it."""
    whole = ctx.capture.memory_limit_peak_bytes or ctx.metric("peak_memory_bytes")
    if whole is None:
        return True
    memory = ctx.analysis.memory if ctx.analysis is not None else None
    tensors = memory.peak_bytes if memory is not None and memory.peak_bytes else None
    grows = tensors if tensors is not None and tensors <= whole else whole
    return whole + (SEARCH_FACTOR - 1) * grows > limit_bytes * (1 - MARGIN)


def largest_batch(scheduler: Scheduler, ctx: Context, fits_at_start: bool) -> Optional[BatchSearch]:
    """Search the largest batch of the training loader that fits, by short runs under the limit."""
    begun = begin_search(scheduler, ctx, fits_at_start)
    return finish_batch_search(begun, ctx) if begun is not None else None


def begin_search(scheduler: Scheduler, ctx: Context, fits_at_start: bool):
    """The search's first part (the script's batch, or halvings until one fits); None without a loader's batch."""
    loader = ctx.loader
    if loader is None or not loader.batch_size:
        return None
    limit, source = search_limit(ctx, scheduler)
    # a stream has no length: up to 1024x its batch, as far as memory goes
    most = max(loader.dataset_len // STEPS_PER_EPOCH, 1) if loader.dataset_len else loader.batch_size * 2 ** 10
    scheduler.probe_limit_bytes = limit  # on the host without --memory-limit: the machine is never exhausted
    return first_fit(_prober(scheduler), loader.batch_size, fits_at_start, limit, source,
                     most if fits_at_start else loader.batch_size)


def finish_batch_search(begun, ctx: Context) -> BatchSearch:
    return _with_fixed_reason(finish_search(begun), ctx)


def _prober(scheduler: Scheduler) -> Callable[[int], Optional[BatchProbe]]:
    def probe(batch: int) -> Optional[BatchProbe]:
        setting = {"batch_size": batch}
        measurement = scheduler.run(Arm("batch_size", setting, (Change("batch_size", setting),)), probe=True)
        if measurement is None:
            return None
        scheduler.learn(measurement)
        return probe_result(batch, measurement)

    return probe


def probe_result(batch: int, m: Measurement) -> BatchProbe:
    oom = m.status == Status.OUT_OF_MEMORY
    fits = bool(m.windows) and not oom
    return BatchProbe(batch, fits, m.peak_memory_bytes, out_of_memory=oom, detail="" if fits else failure_text(m)[:300])


def _with_fixed_reason(search: BatchSearch, ctx: Context) -> BatchSearch:
    """A search that found nothing that fits says what the model's own tensors take, as far as measured."""
    sizes = ctx.capture.memory_sizes
    if search.largest_fitting is not None or sizes is None:
        return search
    own = sizes.parameters_bytes + sizes.gradients_bytes + sizes.optimizer_state_bytes
    parts = (f"parameters {fmt_gib(sizes.parameters_bytes)}, gradients {fmt_gib(sizes.gradients_bytes)}, optimizer "
             f"state {fmt_gib(sizes.optimizer_state_bytes)} (as far as measured before it ran out) of the "
             f"{fmt_gib(search.limit_bytes)} limit")
    advice = ("; the model's own tensors take most of it: shard them across GPUs (FSDP, ZeRO), train in lower "
              "precision, freeze part of the model, or use an optimizer with less state")
    return replace(search, note=f"{search.note}: {parts}{advice if own >= search.limit_bytes / 2 else ''}")


def fit_out_of_memory(scheduler: Scheduler, ctx: Context, wanted: Optional[list[str]] = None) -> FitOutcome:
    """The memory levers (those in `wanted`, when the user named some) on a run that ran out of memory, under the
    same limit. First what keeps the effective batch, each to a verdict: accumulation with the fewest
    micro-batches that fit (the first batch that fits, by short runs, sizes them), checkpointing, lower
    precision, then accumulation with twice as many; the largest-batch search after them, with what the budget
    leaves. Each variant's runs are as long as its measured steps need."""
    levers = [i for i in MEMORY_LEVERS if wanted is None or i in wanted]
    begun, search, arms, reasons, interrupted, sized = None, None, [], {}, False, ctx
    try:
        if "grad_accumulation" in levers:  # the micro-batch: the first batch that fits, by halvings
            begun = begin_search(scheduler, ctx, fits_at_start=False)
        sized = Context(ctx.capture, ctx.analysis, (begun.lo or None) if begun is not None else None)
        reasons = {i: _skip_reason(i, sized, begun) for i in levers}
        arms = _effective_batch_first([arm for i in levers if not reasons[i] for arm in arms_for(i, sized)])
        _run_levers(scheduler, arms, sized)
        if begun is not None:
            search = finish_batch_search(begun, ctx)
    except (ExperimentsInterrupted, KeyboardInterrupt):
        interrupted = True
        search = begun.done() if begun is not None and search is None else search
    limit = search_limit(ctx, scheduler)[0]
    results = _results(arms, sized, limit, _budget_note(scheduler, arms))
    estimated = inline_accumulation(ctx.capture) if reasons.get("grad_accumulation") and ctx.loader is None else None
    skipped = [skipped_experiment(i, reason, "samples/s") for i, reason in reasons.items()
               if reason and not (i == "grad_accumulation" and estimated is not None)]
    return FitOutcome(tuple(results + ([estimated] if estimated else []) + skipped), _headline(results), search,
                      interrupted)


def _effective_batch_first(arms: list[Arm]) -> list[Arm]:
    """Accumulation with the fewest micro-batches, checkpointing, precision (each keeps the effective batch and
    the speed), then accumulation with more micro-batches (headroom, for the time it costs)."""
    fewest = [a for a in arms if a.optimization == "grad_accumulation"][:1]
    return fewest + [a for a in arms if a not in fewest and a.optimization != "grad_accumulation"] + \
        [a for a in arms if a.optimization == "grad_accumulation" and a not in fewest]


def _run_levers(scheduler: Scheduler, arms: list[Arm], ctx: Context) -> None:
    """Round-robin (every lever's runs share the machine's luck alike), no second try after a failure; each run
    sized from the steps measured so far (steps of seconds get fewer, and the time they need)."""
    for _ in range(cost.LEVER_RUNS):
        for arm in arms:
            if any(_ran_out(m) or not m.windows for m in arm.runs):
                continue
            arm.step_s = _expected_step_s(scheduler, arm, ctx)
            measurement = scheduler.run(arm, open_ended=arm.step_s is None)
            if measurement is None and not arm.runs:  # no room for a timed run: a short one still says if it fits
                measurement = scheduler.run(arm, probe=True)
                arm.short_only = measurement is not None
            if measurement is not None:
                scheduler.learn(measurement)


# a checkpointed step runs the forward twice: about a third longer than the plain step
CHECKPOINT_SLOWDOWN = 1.4


def _expected_step_s(scheduler: Scheduler, arm: Arm, ctx: Context) -> Optional[float]:
    """An optimizer step of this arm, from the seconds a sample took in the runs so far (None before any measured
    one). Every lever keeps the script's batch per optimizer step (accumulation in micro-batches), and a timed
    run's steps are optimizer steps."""
    slower = CHECKPOINT_SLOWDOWN if arm.optimization == "activation_checkpointing" else 1.0
    if scheduler.sample_s is not None and ctx.loader is not None and ctx.loader.batch_size:
        return scheduler.sample_s * ctx.loader.batch_size * slower
    # no loader: every run so far was at the script's batch, so a step seen is one of these
    return scheduler.seen_step_s * slower if scheduler.seen_step_s else None


def _budget_note(scheduler: Scheduler, arms: list[Arm]) -> str:
    """For variants the budget left without the runs an interval needs: how long their runs take and the
    --budget-seconds that gives each of them (what was spent, plus the runs still missing)."""
    wanted = cost.RUNS_FOR_INTERVAL
    missing = [(arm, wanted - len(arm.runs)) for arm in arms
               if not any(_ran_out(m) or not m.windows for m in arm.runs) and len(arm.runs) < wanted]
    if not missing:
        return ""
    needed = scheduler.elapsed_s() + sum(scheduler.estimate_s(arm) * count for arm, count in missing)
    longest = max(missing, key=lambda item: scheduler.estimate_s(item[0]))[0]
    steps = f"its steps take about {longest.step_s:.1f} s, so " if longest.step_s and longest.step_s >= 0.5 else ""
    return (f"{steps}a timed run needs about {scheduler.estimate_s(longest):.0f} s; "
            f"--budget-seconds {cost.budget_to_ask_s(needed)} gives every variant the {wanted} runs of an interval")


def _skip_reason(optimization: str, ctx: Context, begun) -> Optional[str]:
    if optimization == "grad_accumulation" and begun is not None and not begun.lo:
        return f"no micro-batch fits: {begun.done().note}"
    return REGISTRY[optimization].skip_reason(ctx)


def _ran_out(m: Measurement) -> bool:
    return m.status == Status.OUT_OF_MEMORY


def _results(arms: list[Arm], ctx: Context, limit: Optional[int], budget_note: str = "") -> list[Experiment]:
    clean = [arm for arm in arms if not any(_ran_out(m) for m in arm.runs)]  # partial windows are no sample
    noise = pooled_noise([arm.throughputs("samples/s") for arm in clean])
    return [_result(arm, ctx, limit, noise, budget_note) for arm in arms]


def _result(arm: Arm, ctx: Context, limit: Optional[int], noise, budget_note: str = "") -> Experiment:
    optimization = REGISTRY[arm.optimization]
    peak = max((m.peak_memory_bytes for m in arm.runs if m.peak_memory_bytes), default=None)
    common = dict(optimization=arm.optimization, setting=arm.setting, metric="samples/s", speedup=None, ci=None,
                  loss_drift=None, peak_memory_bytes=peak, fidelity=optimization.fidelity, runs=len(arm.runs),
                  applied=arm.runs[0].applied if arm.runs else (), limit_bytes=limit, changes=tuple(arm.changes))
    if not arm.runs:
        return Experiment(**common, verdict=Verdict.SKIPPED, reason="not run: the experiment budget ran out" +
                          (f" ({budget_note})" if budget_note else ""))
    ran_out = [m for m in arm.runs if _ran_out(m)]
    if ran_out:
        return Experiment(**common, verdict=Verdict.OUT_OF_MEMORY, reason=_ran_out_reason(ran_out[0], limit))
    rates = arm.throughputs("samples/s")
    if not arm.ok_runs() or not rates:
        return Experiment(**common, verdict=Verdict.FAILED, reason=failure_text(arm.runs[-1]))
    common["change"] = change_text(arm.changes, ctx)
    interval = throughput_interval(rates, noise)
    if interval is None:  # its speed, without an interval
        more = f" ({budget_note})" if budget_note else ""
        what = "a short run (three steps) only, no timed run" if arm.short_only else "one run only"
        return Experiment(**common, verdict=Verdict.FITS, throughput=rates[0],
                          reason=f"fits; {what} (the budget), so no interval on its speed{more}")
    rate, ci = interval
    return Experiment(**common, verdict=Verdict.FITS, throughput=rate, throughput_ci=ci,
                      reason=_fits_reason(peak, limit, len(arm.ok_runs())))


def _fits_reason(peak: Optional[int], limit: Optional[int], runs: int) -> str:
    if not peak or not limit:
        return f"fits, over {runs} runs"
    headroom = " (little headroom: a longer run may not fit)" if peak > (1 - MARGIN) * limit else ""
    return f"fits over {runs} runs: peak {fmt_gib(peak)}, {peak / limit:.0%} of the {fmt_gib(limit)} limit{headroom}"


def _ran_out_reason(m: Measurement, limit: Optional[int]) -> str:
    return f"ran out of memory in step {max(0, m.steps_seen - 1)}" + (f" under the {fmt_gib(limit)} limit"
                                                                      if limit else "")


def _headline(results: list[Experiment]) -> Optional[Headline]:
    """The fastest variant that fits; those that fit too and whose interval overlaps its are named beside it (not
    measurably slower on this machine). None when none fits."""
    fitting = [r for r in results if r.verdict == Verdict.FITS and r.throughput is not None]
    if not fitting:
        return None
    best = max(fitting, key=lambda r: r.throughput)
    tied = tuple(setting_label(r.optimization, r.setting) for r in fitting if r is not best and r.throughput_ci
                 and best.throughput_ci and r.throughput_ci[1] >= best.throughput_ci[0])
    return Headline(changes=(setting_label(best.optimization, best.setting),), speedup=None, ci=None,
                    verdict=Verdict.FITS, metric=best.metric, throughput=best.throughput,
                    throughput_ci=best.throughput_ci, tied_with=tied)
