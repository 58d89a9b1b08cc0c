"""The sentences the report and the terminal share: the verdict and what happened to the script."""
from __future__ import annotations

import math
from pathlib import Path
from typing import Optional

from diagnose.formatting import (
    OWN_CODE,
    display_location,
    fmt_flops,
    fmt_gib,
    fmt_ms,
    fmt_seconds,
    setting_label,
    startup_place,
)
from diagnose.model import Analysis, Capture, Diagnosis, Headline, OutOfMemory, Startup, Status, Verdict, stated_step_s

CATEGORY_NAMES = {
    "training": "training",
    "data-loading": "data loading", "transfer": "host-to-device transfer", "utilization": "low utilization",
    "memory": "memory", "host-overhead": "host overhead", "communication": "communication",
    "compile": "torch.compile",
}


def verdict(diagnosis: Diagnosis, analysis: Optional[Analysis]) -> str:
    if diagnosis.out_of_memory is not None:
        return out_of_memory_sentence(diagnosis.out_of_memory)
    if analysis is None or not analysis.steps:
        if diagnosis.hang is not None:
            return ("The hang came before any step was profiled, so there is no speed diagnosis: the wait above is "
                    "the finding.")
        return "No training step was measured, so there is no diagnosis."
    ranked = [f for f in diagnosis.findings if f.severity in ("high", "medium")]
    if not ranked:
        compute = diagnosis.breakdown.get("compute", 0.0)
        shown = stated_step_s(diagnosis.step_time_s) or 0.0
        step = f"{'step' if diagnosis.step_time_s.get('unprofiled') else 'mean profiled step'} {shown * 1e3:.1f} ms"
        return f"No bottleneck found: {compute:.0%} of each step is compute in torch ops ({step})."
    top = ranked[0]
    where = f" ({top.location})" if top.location else ""
    if top.category == "training":
        return f"Not training{where}: {top.message}"
    rank = f" on rank {int(analysis.metrics['rank'])}" if len(analysis.ranks) > 1 else ""
    share = "the whole run" if top.share_of == "run" else "step time"
    return (f"Bottleneck{rank}: {CATEGORY_NAMES[top.category]}, {top.cost_fraction:.0%} of {share}. "
            f"{top.title}{where}.")


def out_of_memory_sentence(oom: OutOfMemory) -> str:
    """'Out of memory at step 7, in backward: it asked for 1.2 GiB with 3.1 GiB in use, against 4.0 GiB
    (--memory-limit).'"""
    where = f"at step {oom.step}" if oom.step is not None else "before the first step"
    asked = f"it asked for {fmt_gib(oom.requested_bytes)}" if oom.requested_bytes else "an allocation failed"
    used = f" with {fmt_gib(oom.in_use_bytes)} in use" if oom.in_use_bytes else ""
    limit = f", against {fmt_gib(oom.limit_bytes)} ({oom.limit_source})" if oom.limit_bytes else ""
    return f"Out of memory {where}, in {PHASE_WORDS.get(oom.phase, oom.phase)}: {asked}{used}{limit}."


PHASE_WORDS = {"data": "data loading", "forward": "forward", "backward": "backward", "optimizer": "the optimizer step",
               "other": "code between steps"}


def memory_sentence(memory) -> str:
    """'Peak 126.8 MiB of tensors, in the optimizer step (0.5% of 23.5 GiB, the machine's memory): optimizer
    state 33% · parameters 17% · gradients 17% · other 34%.'"""
    if memory is None or not memory.peak_bytes:
        return ""
    peak = memory.peak_bytes
    kind = "Estimated need" if memory.estimate else "Peak"
    where = f", in {PHASE_WORDS.get(memory.peak_phase, memory.peak_phase)}" if memory.peak_phase else ""
    limit = (f" ({peak / memory.limit_bytes:.0%} of {fmt_gib(memory.limit_bytes)}, {memory.limit_source})"
             if memory.limit_bytes else "")
    parts = " · ".join(f"{p.name} {p.bytes / peak:.0%}" for p in sorted(memory.parts, key=lambda p: -p.bytes)
                       if p.bytes / peak >= 0.005)
    return f"{kind} {fmt_gib(peak)} of tensors{where}{limit}" + (f": {parts}." if parts else ".")


def speed_sentence(light) -> str:
    """'5.31 TFLOP per step at 42.8 TFLOP/s: 64% of this GPU's float32 peak (67 TFLOP/s, datasheet); in bfloat16
    this device could do them in 5.37 ms (4% of that peak).'"""
    if light is None:
        return ""
    text = f"{fmt_flops(light.flops.per_step)} per step at {fmt_flops(light.achieved_flops_s)}/s"
    if light.peak is not None:
        text += (f": {light.mfu:.0%} of this device's {light.dtype} peak ({fmt_flops(light.peak.per_s)}/s, "
                 f"{_kind(light.peak)})")
    else:
        text += f" in {light.dtype} (no peak known for this device and dtype)"
    if light.best is not None and light.best.dtype != light.dtype:
        text += (f"; in {light.best.dtype} it could do them in {fmt_ms(light.light_step_s)} "
                 f"({light.mfu_best:.0%} of that peak, {fmt_flops(light.best.per_s)}/s, {_kind(light.best)})")
    elif light.best is not None:
        text += f"; its speed-of-light step is {fmt_ms(light.light_step_s)}"
    if light.busy_frac is not None and light.mfu_while_busy is not None:
        text += (f". The device computed {light.busy_frac:.0%} of the step, at {light.mfu_while_busy:.0%} of its "
                 f"{light.dtype} peak while it did; the rest it waited (data, host work, syncs)")
    return text + "."


def _kind(peak) -> str:
    return "measured" if peak.source.startswith("measured") else "datasheet"


def status_sentence(capture: Optional[Capture], analysis: Optional[Analysis]) -> str:
    steps = len(analysis.steps) if analysis else 0
    if capture is None and analysis is not None:
        return f"Analysed {steps} step(s) of an existing trace ({analysis.step_definition})."
    if capture is None:
        return "The script did not start under the profiler; nothing was measured."
    name = Path(capture.script).name
    if capture.status == Status.COMPLETED:
        ranks = f" on each of {len(capture.ranks)} ranks" if len(capture.ranks) > 1 else ""
        timed = capture.unprofiled_window
        fitted = f" ({capture.fit_note})" if capture.fit_note else ""
        if timed:
            return (f"Timed {timed.steps} steps without the profiler after {capture.warmup_steps} warm-up steps, "
                    f"then profiled {steps}{ranks} and stopped {name}{fitted}.")
        return (f"Profiled {steps} steps after {capture.warmup_steps} warm-up steps{ranks}, then stopped "
                f"{name}{fitted}.")
    if capture.status == Status.OUT_OF_MEMORY:
        covered = (f"Results cover the {steps} step(s) profiled before that." if steps else
                   "No step was profiled before that: the sizes below are as far as it got.")
        return f"{name} ran out of memory ({capture.error.type if capture.error else 'no message'}). {covered}"
    if capture.status == Status.SCRIPT_ERROR and capture.error:
        at = f" at step {capture.error.step}" if capture.error.step is not None else ""
        return (f"{name} raised {capture.error.type}{at}: {capture.error.message.strip().rstrip('.')}. "
                f"Results cover the {steps} step(s) measured before that." + worker_sentence(capture.worker_failure))
    if capture.status == Status.INTERRUPTED:
        return f"Interrupted (Ctrl-C). Results cover the {steps} step(s) measured before that."
    if capture.status == Status.STOPPED:
        return f"Stopped by a signal (SIGTERM) after {capture.steps_seen} steps; {steps} were profiled."
    if capture.status == Status.HUNG and capture.hang is not None:
        return hang_sentence(capture)
    if capture.status == Status.TIMEOUT:
        return (f"Stopped at the time limit after {capture.steps_seen} steps; {steps} were profiled."
                + _long_step_hint(capture))
    if capture.status == Status.NO_STEPS:
        return _no_step_sentence(capture, name)
    if capture.status == Status.SCRIPT_FINISHED:
        return (f"{name} finished on its own after {capture.steps_seen} steps; {steps} were profiled."
                + _long_step_hint(capture))
    return f"Capture ended with status {capture.status}."


def worker_sentence(failure) -> str:
    """' A DataLoader worker died (Killed): likely killed with SIGKILL: ... Batches in flight: ... Fix: ...'"""
    if failure is None:
        return ""
    how = failure.signal or (f"exit code {failure.exit_code}" if failure.exit_code is not None else "no signal seen")
    facts = []
    if failure.in_flight_bytes is not None:
        one = fmt_bytes(failure.batch_bytes)
        facts.append(f"batches in flight {fmt_bytes(failure.in_flight_bytes)} (one batch {one} x {failure.workers} "
                     f"workers x prefetch {failure.prefetch_factor})")
    if failure.shm_bytes is not None:
        facts.append(f"/dev/shm {fmt_bytes(failure.shm_bytes)} ({fmt_bytes(failure.shm_free_bytes)} free)")
    if failure.worker_rss_bytes is not None:
        facts.append(f"the worker held {fmt_bytes(failure.worker_rss_bytes)} "
                     f"({fmt_bytes(failure.workers_rss_bytes)} all {failure.workers} workers) "
                     f"{failure.seconds_before:.1f} s before")
    if failure.available_memory_bytes is not None:
        facts.append(f"{fmt_gib(failure.available_memory_bytes)} of the machine's memory available")
    if failure.cgroup_limit_bytes is not None:
        facts.append(f"the container's (cgroup's) memory limit {fmt_bytes(failure.cgroup_limit_bytes)}")
    if failure.oom_kills:
        facts.append(f"{failure.oom_kills} OOM kill(s) in the cgroup during the run")
    seen = f" Seen then: {'; '.join(facts)}." if facts else ""
    return f" A DataLoader worker died ({how}). Likely cause: {failure.why}.{seen} Fix: {failure.fix}."


BYTE_UNITS = (("GiB", 2 ** 30), ("MiB", 2 ** 20), ("KiB", 2 ** 10))


def fmt_bytes(value) -> str:
    """'4.2 KiB', '23.5 GiB', '512 B'."""
    if value is None:
        return "?"
    unit, size = next(((u, s) for u, s in BYTE_UNITS if value >= s), ("B", 1))
    return f"{value} B" if size == 1 else f"{value / size:.1f} {unit}"


def hang_sentence(capture: Capture) -> str:
    """'Hung: after 8 steps of about 0.6 ms, the next waited 11.9 s at train.py:11 in wait_for_the_others
    (lock.acquire()), waiting on a lock. Stopped at --max-seconds 12.'"""
    hang = capture.hang
    typical = f" of about {fmt_ms(hang.typical_step_s)}" if hang.typical_step_s else ""
    where = f" {hang.place()}" if hang.location else ""
    stuck = [w for w in hang.workers if " in " in w.partition(": ")[2]]  # a worker at a line: not idle, not gone
    workers = f" DataLoader {stuck[0].split(', waiting on')[0]}." if stuck else ""
    away = [r for r in hang.ranks if "waiting on a collective" not in r and " at " in r]  # a rank elsewhere
    if hang.waiting_on.startswith("a collective") and away:
        workers += f" Not in the collective: {away[0]}."
    return (f"Hung: after {capture.steps_seen} steps{typical}, the next waited {hang.open_s:.1f} s{where}, waiting on "
            f"{hang.waiting_on}.{workers} Stopped at the time limit; a longer one would not help: the stack below (and "
            f"in capture.json's hang) shows what it waits for.")


def _no_step_sentence(capture: Capture, name: str) -> str:
    """Why no step came, from what the script was doing: still starting (compiling, loading, preparing data, or its
    own set-up before a model, DataLoader or optimizer it has built) needs more time; its own code with nothing
    of training in sight needs its steps marked."""
    start = capture.startup
    mark = " Mark steps with diagnose.step() (see docs/guide/how-a-run-works.md, \"When steps cannot be found\")."
    plain = (f"{name} ran for {capture.wall_s:.0f} s without reaching a training step (no DataLoader batch, "
             "backward() or optimizer step)")
    if start is None or not start.by_activity:
        return plain + "." + mark
    split = startup_split(start)
    training_ahead = capture.model is not None or bool(capture.loaders) or bool(capture.optimizers)
    limit = capture.startup_limit_s
    if start.stopped_at_limit and limit and (start.last_activity != OWN_CODE or training_ahead):
        more = max(limit * 2, math.ceil(start.seconds * 2 / 60) * 60)
        return (f"{name} was still starting when --startup-seconds {limit:g} ran out, "
                f"{startup_place(start.last_activity, start.last_place)} (start-up so far: {split}). No step was "
                f"measured: give it more time, e.g. --startup-seconds {more:g}.")
    split = f" (start-up: {split})" if len(start.by_activity) > 1 else ""
    return plain + f"; it was {startup_place(start.last_activity, start.last_place)}{split}." + mark


def startup_split(start: Startup, least_s: float = 0.5) -> str:
    """'compiling 48 s (torch/_inductor), your code 3 s (prep.py:88), importing 2 s'."""
    parts = []
    for activity, seconds in start.by_activity.items():
        if seconds >= least_s:
            place = start.places.get(activity, "")
            where = f" ({display_location(place) or place})" if place and place != "imports" else ""
            parts.append(f"{activity} {seconds:.0f} s{where}")
    return ", ".join(parts) or f"{start.seconds:.0f} s"


def startup_sentence(start: Optional[Startup]) -> str:
    """'Start-up: 52 s before the first step: compiling 48 s (torch/_inductor), importing 3 s.'; '' when short."""
    if start is None or not start.reached_step or start.seconds < 5:
        return ""
    return f"Start-up: {start.seconds:.0f} s before the first step: {startup_split(start, 1.0)}."


CACHE_WORDS = {"cold": "cold: an empty cache", "warm": "warm: every graph from the cache",
               "mixed": "partly from the cache", "unknown": "cache not read"}


def compile_lines(summary) -> list[str]:
    """The compile time, cold and warm, what it went to, and whether compiling pays back over the run:
    'Compiling: 21 s (cold: an empty cache; 3.2 s warm) ...' Empty when nothing compiled."""
    if summary is None:
        return []
    warm = f"; {fmt_seconds(summary.warm_s)} warm" if summary.warm_s is not None and summary.cache != "warm" else ""
    split = ", ".join(f"{name.replace('_', ' ')} {fmt_seconds(s)}" for name, s in summary.split_s.items() if s >= 0.05)
    counts = [f"{summary.graph_breaks} graph break(s)" if summary.graph_breaks else "",
              f"{summary.recompiles} recompilation(s), {fmt_seconds(summary.recompile_s)}"
              if summary.recompiles else "",
              f"past the recompile limit, running eagerly: {', '.join(summary.eager_after_limit)}"
              if summary.eager_after_limit else ""]
    lines = [f"Compiling (torch {summary.torch_version}): {fmt_seconds(summary.compile_s)} "
             f"({CACHE_WORDS.get(summary.cache, summary.cache)}{warm})" + (f": {split}" if split else "")
             + "".join(f"; {c}" for c in counts if c) + "."]
    lines.append(f"  {break_even_text(summary)}")
    for trial in summary.trials:
        if trial.run_speedup is not None:
            lines.append(f"  {trial.label}: steady {speedup_text(trial.speedup, trial.speedup_ci)}, compiling "
                         f"{fmt_seconds(trial.compile_s)} against {fmt_seconds(trial.baseline_compile_s)}: over the "
                         f"run's {trial.run_steps:,.0f} steps {speedup_text(trial.run_speedup, trial.run_speedup_ci)} "
                         f"({trial.run_verdict})")
    return lines


def break_even_text(summary) -> str:
    """'Compiled steps save 0.6 ms each: compiling pays back after 5,400 steps (the run has 1,024).'"""
    if summary.saved_per_step_s is None:
        return f"Break-even unknown: {summary.note}." if summary.note else "Break-even unknown."
    if summary.saved_per_step_s <= 0:
        return (f"Compiled steps are no faster than eager ones ({fmt_ms(summary.compiled_step_s)} against "
                f"{fmt_ms(summary.eager_step_s)}): compiling never pays back here.")
    run = f" (the run has {summary.run_steps:,.0f})" if summary.run_steps else ""
    return (f"Compiled steps save {fmt_ms(summary.saved_per_step_s)} each ({fmt_ms(summary.compiled_step_s)} against "
            f"{fmt_ms(summary.eager_step_s)} eager): compiling pays back after {summary.break_even_steps:,.0f} "
            f"steps{run}.")


def _long_step_hint(capture: Capture) -> str:
    """Long steps: the fewer steps profiled, or when none was the options that would give a diagnosis."""
    return f" {capture.fit_note[0].upper()}{capture.fit_note[1:]}." if capture.fit_note else ""


def speedup_text(speedup: Optional[float], ci, digits: Optional[int] = None) -> str:
    """'1.04x [1.01-1.07]', '9.6x [8.8-10.5]'; empty when nothing was measured. Two decimals below 2x, where one
    would round a verified 1.04x [1.01-1.07] to '1.0x [1.0-1.1]'."""
    if speedup is None:
        return ""
    if digits is None:
        digits = 2 if speedup < 2 or (ci and ci[0] < 2) else 1
    interval = f" [{ci[0]:.{digits}f}-{ci[1]:.{digits}f}]" if ci else ""
    return f"{speedup:.{digits}f}x{interval}"


def throughput_text(rate: Optional[float], ci, metric: str) -> str:
    """'6845 samples/s [6432-7284]': a variant's own speed, where there is no baseline to be faster than."""
    if rate is None:
        return ""
    interval = f" [{ci[0]:.0f}-{ci[1]:.0f}]" if ci else ""
    return f"{rate:.0f} {metric}{interval}"


def result_text(experiment) -> str:
    """What a setting measured: its speedup over the baseline, or (a run out of memory) its own throughput."""
    if experiment.throughput is not None:
        return throughput_text(experiment.throughput, experiment.throughput_ci, experiment.metric)
    return speedup_text(experiment.speedup, experiment.ci)


def fits_sentence(diagnosis: Diagnosis) -> str:
    """A run that ran out of memory: the fastest variant that fits, or that none of those tried did."""
    head = diagnosis.headline
    tried = [e for e in diagnosis.experiments if e.verdict in (Verdict.FITS, Verdict.OUT_OF_MEMORY, Verdict.FAILED)]
    if head is not None and head.verdict == Verdict.FITS:
        best = next((e for e in tried if e.verdict == Verdict.FITS and e.throughput == head.throughput), None)
        peak = f" (peak {fmt_gib(best.peak_memory_bytes)} of {fmt_gib(best.limit_bytes)})" \
            if best is not None and best.peak_memory_bytes and best.limit_bytes else ""
        fitting = [e for e in tried if e.verdict == Verdict.FITS]
        which = f"the only one of the {len(tried)} tried that fits" if len(fitting) == 1 else \
            f"the fastest of the {len(fitting)} of {len(tried)} tried that fit"
        tied = (f" (not measurably faster than {', '.join(head.tied_with)}: the intervals overlap)"
                if head.tied_with else "")
        return (f"Fits: {', '.join(head.changes)} trains at "
                f"{throughput_text(head.throughput, head.throughput_ci, head.metric)}{peak}, {which}{tied}.")
    if tried:
        return (f"None of the {len(tried)} variants tried fits: "
                + "; ".join(f"{e.optimization} {e.reason}" for e in tried) + ".")
    return ""


def batch_search_sentence(search) -> str:
    """The largest batch that fits, how it was found, and (when it is larger than the script's) what a larger
    batch asks of the learning rate."""
    if search is None:
        return ""
    model = (f" (predicted {search.predicted_batch} from {fmt_gib(search.fixed_bytes)} + "
             f"{fmt_gib(int(search.per_sample_bytes))} a sample)"
             if search.predicted_batch is not None and (search.fixed_bytes or 0) >= 0 else "")
    if search.largest_fitting is None:
        return f"No batch size fits in {fmt_gib(search.limit_bytes)} ({search.limit_source}): {search.note}."
    return (f"Largest batch that fits in {fmt_gib(search.limit_bytes)} ({search.limit_source}): "
            f"{search.largest_fitting}{model}; {search.note}, over {len(search.probes)} short runs."
            + (" A larger batch may need a larger learning rate (scale it with the batch, with warm-up)."
               if search.start_batch and search.largest_fitting > search.start_batch else ""))


COMPUTE_SHOWN_FROM = 0.3  # of the step computed: below it the step waits, and its MFU says nothing of what to fix


def compute_matters(diagnosis: Diagnosis) -> bool:
    """Whether the step's arithmetic is what holds it back enough for MFU to tell something: the device busy (or,
    without a device timeline, the compute bucket) for at least COMPUTE_SHOWN_FROM of the step."""
    light = diagnosis.speed_of_light
    if light is None:
        return False
    busy = light.busy_frac if light.busy_frac is not None else diagnosis.breakdown.get("compute")
    return busy is None or busy >= COMPUTE_SHOWN_FROM


def apply_command(run_dir, patch: str) -> str:
    """The command that writes a change's patch (RUN/verified.patch, RUN/changes/NAME.patch) into the user's files;
    "" when it has none."""
    if not patch:
        return ""
    name = patch.rpartition("/")[2].removesuffix(".patch")
    return f"diagnose apply {run_dir}" + ("" if name == "verified" else f" --change {name}")


def headline_sentence(diagnosis: Diagnosis) -> str:
    """The verified result of the experiments; empty when none ran."""
    head = diagnosis.headline
    if diagnosis.status == Status.OUT_OF_MEMORY:
        return fits_sentence(diagnosis)
    if head is not None and head.verdict == Verdict.FASTER and head.speedup:
        count = len(head.changes)
        speedup, _, interval = speedup_text(head.speedup, head.ci).partition(" ")
        return (f"Verified: {count} change{'' if count == 1 else 's'}, {speedup} faster"
                f"{' ' + interval if interval else ''}, {head.metric}: {', '.join(head.changes)}")
    budget = diagnosis.budget
    if budget is not None and budget.too_small:
        return (f"No experiment ran: the budget of {budget.budget_s:.0f} s fits fewer timed runs than a verdict "
                f"needs (about {budget.run_estimate_s:.0f} s each). To try them: {budget.rest_command}")
    if diagnosis.experiments_interrupted:
        return ("Experiments interrupted (Ctrl-C): no combination was measured. "
                + _unverified_sentence(diagnosis).replace("No combination of changes was verified faster; on its own",
                                                          "Before that"))
    sentence = _unverified_sentence(diagnosis) if diagnosis.experiments else ""
    if sentence and budget is not None and budget.untried:
        sentence += f" Left without a verdict by the budget: {', '.join(budget.untried)} ({budget.rest_command})."
    return sentence


def _unverified_sentence(diagnosis: Diagnosis) -> str:
    """No verified combination; settings that were faster on their own still deserve a mention."""
    alone = [e for e in diagnosis.experiments if e.verdict == Verdict.FASTER and e.speedup
             and e.optimization not in ("combined", "ceiling")]
    flagged = _flagged_sentence(diagnosis)
    if not any(e.verdict != Verdict.SKIPPED for e in diagnosis.experiments):
        reasons = "; ".join(f"{e.optimization}: {e.reason.removeprefix('not run: ')}"
                            for e in diagnosis.experiments[:2])
        return f"No experiment ran. {reasons}."
    if not alone:
        return ("No change was verified faster on this machine." + flagged).strip()
    best = max(alone, key=lambda e: e.speedup)
    speedup, _, interval = speedup_text(best.speedup, best.ci).partition(" ")
    label = setting_label(best.optimization, best.setting)
    return (f"No combination of changes was verified faster; on its own, {label} was {speedup} faster"
            f"{' ' + interval if interval else ''}, {best.metric}.{flagged}")


def _flagged_sentence(diagnosis: Diagnosis) -> str:
    """Settings measured on other data than the baseline's: said, never counted as a speedup."""
    flagged = [e for e in diagnosis.experiments if e.verdict == Verdict.FLAGGED]
    if not flagged:
        return ""
    names = ", ".join(dict.fromkeys(e.optimization for e in flagged))
    return f" Flagged, not a speedup: {names} fed other data than the baseline ({flagged[0].data_check_detail})."


def budget_sentence(budget) -> str:
    """What the experiment budget bought, and the command for what it left without a verdict."""
    if budget is None or budget.too_small:
        return ""
    decided = ", ".join(budget.decided) or "none"
    text = (f"Budget {budget.budget_s:.0f} s: {budget.runs} timed runs (about {budget.run_estimate_s:.0f} s each) in "
            f"{budget.spent_s:.0f} s gave verdicts on {decided}.")
    if budget.untried:
        text += f" Without a verdict: {', '.join(budget.untried)}; to try them: {budget.rest_command}"
    return text


def recovery_sentence(head: Optional[Headline]) -> str:
    """How much of the data-loading cost the fixes won back, against the no-data-loading ceiling."""
    if head is None or (head.data_loading_recovered_frac is None and not head.ceiling_speedup):
        return ""
    ceiling = (f"with no data loading at all (ceiling) steps would be {speedup_text(head.ceiling_speedup, None)} faster"
               if head.ceiling_speedup else "")
    if head.data_loading_recovered_frac is None:
        return f"{ceiling[0].upper()}{ceiling[1:]}."
    recovered = f"The fixes recover {head.data_loading_recovered_frac:.0%} of the time data loading cost"
    return f"{recovered}; {ceiling}." if ceiling else f"{recovered}."


def setting_text(setting: dict) -> str:
    """'num_workers=4'; the combined run lists the changes it combines."""
    if "changes" in setting:
        return ", ".join(str(c) for c in setting["changes"])
    return ", ".join(f"{k}={v}" for k, v in setting.items())


def fed_data_sentence(experiments) -> str:
    """How what the runs fed was checked, and what fingerprinting cost the training thread per step."""
    costs = sorted(e.fingerprint_step_s for e in experiments if e.fingerprint_step_s is not None)
    if not costs:
        return ""
    return ("Each timed run recorded a fingerprint of every sample it fed (hashed on the training thread, "
            f"{costs[len(costs) // 2] * 1e6:.0f} us per step); a setting that fed other samples than the baseline "
            "is flagged, not counted as a speedup.")


PREDICTION_WORDS = {"over-predicted": "the finding over-predicted it: more than 2x off, beyond the interval",
                    "under-predicted": "the finding under-predicted it: more than 2x off, beyond the interval"}
# what an undecided experiment's timed windows showed (Experiment.undecided_cause, experiments/undecided.py)
UNDECIDED_CAUSE_WORDS = {"recompiles": "torch.compile recompiled inside the timed windows",
                         "compiling": "torch.compile compiled inside the timed windows",
                         "epoch-restarts": "epoch start-ups inside the timed windows",
                         "noisy-machine": "a noisy machine"}


def undecided_text(cause: str) -> str:
    """'undecided (torch.compile recompiled inside the timed windows)'."""
    words = UNDECIDED_CAUSE_WORDS.get(cause, cause)
    return f"undecided ({words})" if words else "undecided"


def prediction_text(finding, check) -> str:
    """'predicted 1.45x at batch_size(batch_size=4096), measured 1.42x [1.38-1.46]': the finding's bound beside its
    best experiment; 'fix predicted: up to 1.68x' before (or without) one."""
    if finding.predicted_speedup is None:
        return ""
    if check is None or check.measured_speedup is None:
        bound = "at least" if finding.prediction_bound == "lower" else "up to"
        return f"predicted: {bound} {speedup_text(finding.predicted_speedup, None)} if its fix removed the cost"
    measured = speedup_text(check.measured_speedup, check.measured_ci)
    off = f": {PREDICTION_WORDS[check.verdict]}" if check.verdict in PREDICTION_WORDS else ""
    if check.verdict == Verdict.UNDECIDED:
        off = f": {undecided_text(check.undecided_cause)}, too wide to check the prediction"
    basis = f" ({check.basis})" if check.basis else ""
    return (f"predicted {speedup_text(check.predicted_speedup, None)} at {check.experiment}{basis}, "
            f"measured {measured}{off}")


def predictions_sentence(diagnosis) -> str:
    """'Predictions: 2 of 3 checked by an experiment held within 2x; 1 off by more; 1 left undecided by an
    experiment too wide to check it (a noisy machine).' An undecided check is no check: counted apart."""
    undecided = [c for c in diagnosis.predictions if c.verdict == Verdict.UNDECIDED]
    checked = [c for c in diagnosis.predictions if c.measured_speedup is not None and c.verdict != Verdict.UNDECIDED]
    left = ""
    if undecided:
        causes = ", ".join(dict.fromkeys(UNDECIDED_CAUSE_WORDS.get(c.undecided_cause, c.undecided_cause)
                                         for c in undecided if c.undecided_cause))
        left = f"{len(undecided)} left undecided by an experiment too wide to check it" + (
            f" ({causes})" if causes else "")
    if not checked:
        return f"Predictions: none checked by an experiment; {left}." if left else ""
    held = len(checked) - diagnosis.predictions_off
    off = f"; {diagnosis.predictions_off} off by more" if diagnosis.predictions_off else ""
    more = f"; {left}" if left else ""
    return f"Predictions: {held} of {len(checked)} checked by an experiment held within 2x{off}{more}."
