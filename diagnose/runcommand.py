"""What the CLI commands do, kept apart from click's option parsing."""
from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Callable, Optional

from rich.console import Console

from diagnose.capture.runner import check_script, run_capture
from diagnose.errors import UserError
from diagnose.model import RunConfig, Status
from diagnose.pipeline import (ExperimentResults, can_experiment, diagnose_capture, finish_run, load_capture,
                               load_rules, run_experiments_stage, write_outputs)
from diagnose.report.terminal import print_summary
from diagnose.report.wording import budget_sentence, status_sentence, verdict
from diagnose.serial import dumps

PROFILER_NOISE = ("USDT:", "CPUAllocator.cpp", "Profiler clears events", "_warn_once(", "STAGE:",
                  "ActivityProfilerController", "Memory block of unknown size")


def run_command(script: str, script_args: tuple[str, ...], *, out: Optional[str], warmup: int, steps: int,
                max_seconds: float, experiments: str, budget_seconds: float, with_stack: bool, rules_dirs: tuple[str, ...], templates_dir: Optional[str],
                as_json: bool, open_report: bool, make_run_dir: Callable[[Optional[str], str], Path],
                launcher: tuple[str, ...] = (), baseline: Optional[Path] = None,
                fail_if_slower: Optional[float] = None) -> int:
    from diagnose.cli import progress_bar
    from diagnose import __version__
    import torch

    check_script(script)
    load_rules(rules_dirs)  # a broken rule file fails now, not after the run
    baseline_side = _load_baseline(baseline, script, rules_dirs)  # a baseline that cannot be compared fails now too
    run_dir = make_run_dir(out, script)
    console = Console(stderr=True)
    console.print(f"diagnose {__version__} · torch {torch.__version__} · {_device_line()}", style="dim", highlight=False)
    config = RunConfig(script=script, script_args=script_args, out_dir=str(run_dir), warmup_steps=warmup, with_stack=with_stack,
                       profile_steps=steps, max_seconds=max_seconds, experiments=experiments, rules_dirs=tuple(rules_dirs),
                       launcher=launcher)
    out_stream = Console(stderr=True) if as_json else Console()
    with progress_bar(console) as progress:
        task = progress.add_task("profiling", total=warmup + steps, note="starting")
        outcome = run_capture(config, run_dir, _printer(progress, out_stream), _progress_handler(progress, task, warmup))
        progress.update(task, note="analysing")
        analysis, findings = diagnose_capture(run_dir, outcome.capture, tuple(rules_dirs))
        progress.update(task, note="done")
        results = ExperimentResults()
        if experiments != "none" and not outcome.interrupted and can_experiment(outcome.capture, analysis):
            results = _experiments(progress, experiments, run_dir, outcome.capture, analysis, findings, budget_seconds)
    result = write_outputs(run_dir, script, outcome.capture, analysis, findings, results, templates_dir)
    _finish_output(console, result, as_json, open_report)
    if outcome.interrupted or results.interrupted:
        return Status.INTERRUPTED.exit_code
    code = Status.exit_code_of(result.diagnosis.status)
    if baseline_side is not None:
        gate_code = _compare_baseline(console, baseline_side, result, rules_dirs, templates_dir, fail_if_slower)
        return code or gate_code
    return code


def _load_baseline(baseline: Optional[Path], script: str, rules_dirs):
    if baseline is None:
        return None
    from diagnose.compare.sides import load_side

    side = load_side(baseline, "--baseline", tuple(rules_dirs))
    if side.side.kind != "run":
        raise UserError(f"--baseline {baseline} is not a run folder",
                        "pass a folder written by `diagnose run`; for traces use `diagnose compare`")
    if Path(side.side.script).name != Path(script).name:
        raise UserError(f"--baseline {baseline} ran another script ({side.side.script})",
                        "pass a run of the same script, or compare them later with `diagnose compare --force`")
    return side


def _compare_baseline(console: Console, baseline, result, rules_dirs, templates_dir, fail_if_slower) -> int:
    from diagnose.comparecommand import compare_with_baseline

    if result.analysis is None or not result.analysis.steps:
        console.print("No comparison with the baseline: this run profiled no complete step.", style="yellow")
        return 0
    return compare_with_baseline(console, baseline, result.run_dir, tuple(rules_dirs), templates_dir, fail_if_slower)


def _experiments(progress, selection, run_dir, capture, analysis, findings, budget_seconds) -> ExperimentResults:
    task = progress.add_task("experiments", total=None, note="planning")
    count = [0]

    def update(label: str) -> None:
        count[0] += 1
        progress.update(task, completed=count[0], note=label)

    def say(text: str) -> None:
        progress.console.print(text, style="dim", soft_wrap=True, markup=False, highlight=False)

    try:
        results = run_experiments_stage(selection, run_dir, capture, analysis, findings, budget_seconds, update, say)
        if budget_sentence(results.budget):
            say(budget_sentence(results.budget))
        return results
    finally:
        progress.update(task, note="done", total=count[0])


def _device_line() -> str:
    import os

    from diagnose.capture.gpu import device_facts

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


def _progress_handler(progress, task, warmup: int):
    def update(line: str) -> None:
        parts = line.split()
        if parts[:1] == ["step"] and len(parts) == 3:
            count = int(parts[1])
            phase = "warm-up" if count <= warmup else "profiling"
            progress.update(task, completed=min(count, int(parts[2])), note=phase)
        elif line:
            progress.update(task, note=line)

    return update


def _finish_output(console: Console, result, as_json: bool, open_report: bool) -> None:
    print_summary(console, result.diagnosis, verdict(result.diagnosis, result.analysis),
                  status_sentence(result.capture, result.analysis), result.run_dir, result.report_path,
                  len(result.capture.redirected_writes) if result.capture else 0)
    if as_json:
        sys.stdout.write(dumps(result.diagnosis).decode() + "\n")
        sys.stdout.flush()
    if open_report and result.report_path:
        import webbrowser

        webbrowser.open(result.report_path.resolve().as_uri())


def report_command(run_dir: Path, rules_dirs, templates_dir, as_json: bool) -> int:
    from diagnose.capture.ranks import merge_rank_captures, rank_dirs

    # ranks launched by the user's own launcher (`diagnose capture`) leave their captures unmerged
    capture = merge_rank_captures(run_dir) if rank_dirs(run_dir) else load_capture(run_dir)
    script = capture.script if capture else str(run_dir)
    result = finish_run(run_dir, script, capture, tuple(rules_dirs), templates_dir)
    _finish_output(Console(stderr=True), result, as_json, False)
    return Status.exit_code_of(result.diagnosis.status)  # as `diagnose run` exited for this run


def capture_command(script: str, script_args: tuple[str, ...], *, out: str, warmup: int, steps: int,
                    max_seconds: float, with_stack: bool) -> int:
    """This process is one rank of a job the user launched (torchrun, srun...): run the capture in it, writing
    into the shared folder OUT (RUN/ranks/rankN and RUN/tb/rankN.*); `diagnose report OUT` merges them."""
    from diagnose.capture.session import DISTRIBUTED_ENV, current_rank, run_child
    from diagnose.runfolder import RunFolder, foreign_entries
    from diagnose.serial import write_json

    check_script(script)
    os.environ[DISTRIBUTED_ENV] = "1"
    run_dir = Path(out).resolve()
    rank = current_rank()
    mine = RunFolder(run_dir).rank(rank) if rank is not None else run_dir
    if RunFolder(mine).capture.exists():
        raise UserError(f"{mine} already holds a capture", "pass a new --out folder for each job")
    foreign = foreign_entries(run_dir)  # ranks share OUT, so it may hold other ranks' files, but only ours
    if foreign:
        raise UserError(f"--out {run_dir} holds files diagnose did not write: {', '.join(foreign[:5])}",
                        "pass a new or empty folder for each job")
    run_dir.mkdir(parents=True, exist_ok=True)
    config = RunConfig(script=script, script_args=script_args, out_dir=str(run_dir), warmup_steps=warmup,
                       profile_steps=steps, max_seconds=max_seconds, with_stack=with_stack)
    if not RunFolder(run_dir).config.exists() or rank in (None, 0):
        write_json(RunFolder(run_dir).config, config)  # every rank writes the same config; the write is atomic
    code = run_child(run_dir)
    if rank in (None, 0):
        print(f"diagnose: this rank's capture is in {mine}; once every rank has finished, analyse them all with: "
              f"diagnose report {run_dir}", file=sys.stderr, flush=True)
    return code


def rules_listing(rules_dirs, show_metrics: bool, check: bool) -> int:
    from diagnose import rules as rule_engine
    from diagnose.analysis.metrics import METRICS
    from diagnose.optimizations import REGISTRY

    console = Console()
    if show_metrics:
        for name, text in METRICS.items():
            console.print(f"[bold]{name}[/]  {text}", highlight=False)
        return 0
    rules = load_rules(rules_dirs)
    if check:
        for rule in rules:
            # with its templates parsed: a syntax error names the file
            rule_engine.load_rule(rule.path, optimization_ids=REGISTRY)
        failures = [(r, c) for r in rules for c in r.cases if r.fires(c.metrics) != c.fires]
        for rule, case in failures:
            console.print(f"[red]FAIL[/] {rule.id} ({rule.path}): expected fires={case.fires} for {case.metrics}")
        console.print(f"{sum(len(r.cases) for r in rules) - len(failures)} passed, {len(failures)} failed")
        return 1 if failures else 0
    import textwrap

    def indented(text: str) -> str:  # wrapped lines keep the indent
        return textwrap.fill(" ".join(text.split()), width=max(console.width, 40), initial_indent="  ",
                             subsequent_indent="  ")

    for rule in sorted(rules, key=lambda r: (r.category, r.id)):
        console.print(f"[bold]{rule.id}[/]  [dim]{rule.category}[/]  {rule.title}", highlight=False)
        if rule.explanation:
            console.print(indented(rule.explanation), highlight=False, markup=False, soft_wrap=True)
        console.print(indented(f"when: {rule.condition.source}"), style="dim", highlight=False, markup=False,
                      soft_wrap=True)
        if rule.optimizations:
            console.print(indented(f"fixes: {', '.join(rule.optimizations)}"), style="dim", highlight=False,
                          markup=False, soft_wrap=True)
        console.print()
    return 0
