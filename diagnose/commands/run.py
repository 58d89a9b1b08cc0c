"""`diagnose run`: profile the script, diagnose it, run the experiments, write the report; with --baseline,
compare this run with an earlier one."""
from __future__ import annotations

import os
import time
from dataclasses import replace
from pathlib import Path
from typing import Optional

from rich.console import Console

from diagnose.capture.compile_cache import private_compile_cache
from diagnose.capture.runner import check_script, restore_abandoned, run_in_child
from diagnose.commands.options import BaselineGate, OutputOptions
from diagnose.commands.output import check_out_dir, finish_output, new_run_dir, progress_bar
from diagnose.commands.pipeline import (
    RunResult,
    can_experiment,
    diagnose_capture,
    run_experiments_stage,
    write_outputs,
)
from diagnose.commands.rules import load_rules
from diagnose.errors import UserError
from diagnose.model import ExperimentResults, RunConfig, Status
from diagnose.report.wording import budget_sentence

PROFILER_NOISE = ("USDT:", "CPUAllocator.cpp", "Profiler clears events", "_warn_once(", "STAGE:",
                  "ActivityProfilerController", "Memory block of unknown size")


def run_command(config: RunConfig, output: OutputOptions, gate: BaselineGate = BaselineGate()) -> int:
    """`config` as the command line gave it; its out_dir empty for a new folder under diagnose_runs/."""
    return run_and_report(config, output, gate)[1]


def run_and_report(config: RunConfig, output: OutputOptions,
                   gate: BaselineGate = BaselineGate()) -> tuple[RunResult, int]:
    """The whole run, as `diagnose run` prints it; the result (run folder, diagnosis) and the exit code."""
    import torch

    from diagnose import __version__

    started = time.monotonic()
    script, rules_dirs, templates_dir = config.script, output.rules_dirs, output.templates_dir
    check_script(script)
    check_out_dir(config.out_dir or None)
    rules = load_rules(rules_dirs)  # a broken rule file fails now, not after the run
    baseline_side = _load_baseline(gate.baseline, script, rules)  # so does a baseline that cannot be compared
    if gate.baseline_ref is not None:
        from diagnose.commands.live import check_revision

        check_revision(script, gate.baseline_ref)  # and a revision without the script
    run_dir = new_run_dir(config.out_dir or None, Path(script).stem)
    config = replace(config, out_dir=str(run_dir))
    _record_sources(run_dir, script)
    console = Console(stderr=True)
    console.print(f"diagnose {__version__} · torch {torch.__version__} · {_device_line()}", style="dim",
                  highlight=False)
    for line in restore_abandoned([Path("diagnose_runs"), run_dir.parent]):
        console.print(line, style="yellow", highlight=False, markup=False)
    out_stream = Console(stderr=True) if output.as_json else Console()
    experiments, warmup = config.experiments, config.warmup_steps
    with progress_bar(console) as progress, private_compile_cache():
        task = progress.add_task("profiling", total=warmup + config.profile_steps, note="starting")
        outcome = run_in_child(config, run_dir, _printer(progress, out_stream),
                               _progress_handler(progress, task))
        fitted = _fitted_to_a_short_script(config, outcome)
        if fitted is not None:  # once: a script that ran fewer steps the second time is reported as it ended
            console.print(f"{Path(script).name} finished after {outcome.capture.steps_seen} steps, before any was "
                          f"profiled: running it again with --warmup 1 --steps {fitted.profile_steps}.",
                          style="yellow", highlight=False)
            config = fitted
            _drop_attempt(run_dir)  # nothing of the first attempt can pass for the second's
            progress.reset(task, total=config.warmup_steps + config.profile_steps, note="starting")
            outcome = run_in_child(config, run_dir, _printer(progress, out_stream),
                                   _progress_handler(progress, task))
        progress.update(task, note="measuring the machine's peak")
        if not outcome.interrupted:
            _measure_peaks(run_dir, outcome.capture)
        progress.update(task, note="analysing")
        analysing = time.monotonic()
        analysis, findings = diagnose_capture(run_dir, outcome.capture, tuple(rules_dirs))
        console.print(_analysis_sentence(time.monotonic() - analysing, time.monotonic() - started), style="dim",
                      highlight=False)
        if not outcome.interrupted and _remeasure_stale_peaks(console, run_dir, outcome.capture, analysis):
            analysis, findings = diagnose_capture(run_dir, outcome.capture, tuple(rules_dirs))
        progress.update(task, note="done")
        results = ExperimentResults()
        if experiments != "none" and not outcome.interrupted and can_experiment(outcome.capture, analysis):
            results = _experiments(progress, experiments, outcome.capture, analysis, findings, run_dir,
                                   config.budget_seconds)
    result = write_outputs(run_dir, script, outcome.capture, analysis, findings, results, templates_dir)
    finish_output(console, result, output.as_json, output.open_report)
    if outcome.interrupted or results.interrupted:
        return result, Status.INTERRUPTED.exit_code
    code = Status.exit_code_of(result.diagnosis.status)
    if baseline_side is not None:
        gate_code = _compare_baseline(console, baseline_side, result, rules, templates_dir,
                                      (gate.fail_if_slower, gate.run_noise))
        return result, code or gate_code
    if gate.baseline_ref is not None and Status.is_ok(result.diagnosis.status):
        from diagnose.commands.live import baseline_ref_gate

        gate_code = baseline_ref_gate(script, config.script_args, gate.baseline_ref, run_dir, config.budget_seconds,
                                      gate.fail_if_slower, console)
        return result, code or gate_code
    return result, code


def _record_sources(run_dir: Path, script: str) -> None:
    """The hashes of the user's source files before the script starts (RUN/sources.json): the changes are handed
    back as patches of these, and `diagnose apply` refuses a file changed since."""
    from diagnose.capture.sources import snapshot
    from diagnose.record.run_record import RunRecord

    RunRecord(run_dir).save_sources(snapshot(script))


def _analysis_sentence(analysis_s: float, run_s: float) -> str:
    """How long reading the traces and applying the rules took, against the run until then (start-up,
    profiling, the peaks, the analysis): the analysis is meant to stay a small part of it."""
    return (f"Traces analysed in {analysis_s:.2f} s ({analysis_s / max(run_s, 1e-9):.0%} of the {run_s:.1f} s "
            f"the run has taken so far).")


def _fitted_to_a_short_script(config: RunConfig, outcome) -> Optional[RunConfig]:
    """The warm-up and profiled steps that fit a script which finished before any step was profiled (its own count
    of steps, as the capture measured them); None when it did not, or when none fit."""
    capture = outcome.capture
    if outcome.interrupted or capture is None or capture.status != Status.SCRIPT_FINISHED:
        return None
    if capture.steps_profiled or not capture.fitted_steps:
        return None
    fitted = replace(config, warmup_steps=1, profile_steps=capture.fitted_steps)
    return fitted if fitted != config else None


def _drop_attempt(run_dir: Path) -> None:
    """What an attempt wrote in this run's own new folder and the next attempt writes again: its capture (a
    second attempt that dies before writing its own must not be read as this one), samples and traces (its
    profiler may have started with no step to finish)."""
    from diagnose.record.run_record import RunRecord

    RunRecord(run_dir).drop_capture()


def _measure_peaks(run_dir: Path, capture) -> None:
    """The device's peak FLOP/s per dtype and memory bandwidth, for the speed of light: measured once per machine
    (cached), in a process of its own, while the device is idle between the capture and the experiments."""
    from diagnose.capture.peak import cached_machine_peaks, peaks_in_child
    from diagnose.model import MachinePeaks
    from diagnose.record.run_record import RunRecord

    if capture is None:
        return
    device = "cuda" if capture.memory_kind == "cuda" else "cpu"
    try:  # a process of its own only to measure (a fresh Python with torch: two seconds)
        peaks = cached_machine_peaks(device) or peaks_in_child(device)
    except KeyboardInterrupt:  # the run's results matter more than the peak: the report is still written
        return
    if peaks:
        RunRecord(run_dir).save_peaks(MachinePeaks(device, peaks))


def _remeasure_stale_peaks(console: Console, run_dir: Path, capture, analysis) -> bool:
    """A step faster than the cached peak (measured while the machine was loaded) would read over 100% of it: the
    analysis raised the peak to the achieved rate; measure the machine again now, the cache keeping at least that
    rate. True when RUN/peaks.json was rewritten (the caller analyses again)."""
    from diagnose.analysis.speed_of_light import stale_peak_floors
    from diagnose.capture.peak import peaks_in_child
    from diagnose.model import MachinePeaks
    from diagnose.record.run_record import RunRecord

    floors = stale_peak_floors(analysis.speed_of_light if analysis is not None else None)
    if not floors or capture is None:
        return False
    console.print(f"This run computed faster than the cached peak of this machine ({', '.join(sorted(floors))}): "
                  "measuring the peak again.", style="dim", highlight=False)
    device = "cuda" if capture.memory_kind == "cuda" else "cpu"
    try:
        peaks = peaks_in_child(device, fresh=True, at_least=floors)
    except KeyboardInterrupt:
        return False
    if not peaks:
        return False
    RunRecord(run_dir).save_peaks(MachinePeaks(device, peaks))
    return True


def _load_baseline(baseline: Optional[Path], script: str, rules):
    if baseline is None:
        return None
    from diagnose.compare.sides import load_side, same_script

    side = load_side(baseline, "--baseline", rules)
    if side.side.kind != "run":
        raise UserError(f"--baseline {baseline} is not a run folder",
                        "pass a folder written by `diagnose run`; for traces use `diagnose compare`")
    if not same_script(side.side.script, script):
        raise UserError(f"--baseline {baseline} ran another script ({side.side.script})",
                        "pass a run of the same script, or compare them later with `diagnose compare --force`")
    return side


def _compare_baseline(console: Console, baseline, result, rules, templates_dir, gate: tuple) -> int:
    """gate: (--fail-if-slower, --run-noise)."""
    from diagnose.commands.compare import compare_with_baseline

    if result.analysis is None or not result.analysis.steps:
        console.print("No comparison with the baseline: this run profiled no complete step.", style="yellow")
        return 0
    return compare_with_baseline(console, baseline, result.run_dir, rules, templates_dir, *gate)


def _experiments(progress, selection, capture, analysis, findings, run_dir, budget_seconds) -> ExperimentResults:
    task = progress.add_task("experiments", total=None, note="planning")
    count = [0]

    def update(label: str) -> None:
        count[0] += 1
        progress.update(task, completed=count[0], note=label)

    def say(text: str) -> None:
        progress.console.print(text, style="dim", soft_wrap=True, markup=False, highlight=False)

    try:
        results = run_experiments_stage(selection, capture, analysis, findings, run_dir, budget_seconds, update, say)
        if budget_sentence(results.budget):
            say(budget_sentence(results.budget))
        return results
    finally:
        progress.update(task, note="done", total=count[0])


def _device_line() -> str:

    from diagnose.capture.device import device_facts

    facts = device_facts()
    if facts:
        return f"cuda {facts['gpu_name']}"
    return f"cpu ({len(os.sched_getaffinity(0)) if hasattr(os, 'sched_getaffinity') else os.cpu_count()} cores)"


def _printer(progress, out_console: Console):
    def show(line: str, is_err: bool) -> None:
        if is_err and any(marker in line for marker in PROFILER_NOISE):
            return  # torch.profiler's own chatter; it stays in script.log
        target = progress.console if is_err else out_console
        target.print(line, markup=False, highlight=False, soft_wrap=True)

    return show


def _progress_handler(progress, task):
    def update(line: str) -> None:
        parts = line.split()
        if parts[:1] == ["step"] and len(parts) == 4:  # step COUNT PLANNED PHASE (session.py)
            count, planned = int(parts[1]), int(parts[2])
            progress.update(task, total=max(planned, count), completed=count, note=parts[3])
        elif line:
            progress.update(task, note=line)

    return update
