"""The pipeline: capture -> analysis -> rules -> report. Each stage reads what the previous one wrote into the
run folder, so `diagnose report RUN` can re-run everything after the capture."""
from __future__ import annotations

import os
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Optional

from diagnose import rules as rule_engine
from diagnose.analysis.analyze import Inputs, analyze
from diagnose.analysis.ranks import combine, rank_of
from diagnose.analysis.trace import load_trace
from diagnose.capture.ranks import rank_dirs
from diagnose.errors import UserError
from diagnose.model import (Analysis, BudgetReport, Capture, Diagnosis, Experiment, Finding, Headline, Samples,
                            StackSamples, Status)
from diagnose.optimizations import REGISTRY
from diagnose.runfolder import RunFolder
from diagnose.serial import read_json, write_json
from diagnose.tbcompat import adapt_trace_for_tensorboard


@dataclass(frozen=True)
class RunResult:
    run_dir: Path
    capture: Optional[Capture]
    analysis: Optional[Analysis]
    diagnosis: Diagnosis
    report_path: Optional[Path]


def trace_paths(run_dir: Path) -> list[Path]:
    return sorted(p for p in RunFolder(run_dir).tb.glob("*.pt.trace.json*") if not p.name.endswith(".tmp"))


def analyze_run(run_dir: Path, capture: Optional[Capture]) -> Optional[Analysis]:
    traces = trace_paths(run_dir)
    if not traces:
        return None
    for path in traces:
        adapt_trace_for_tensorboard(path)  # so TensorBoard's Overview shows the DataLoader time we measured
    ranks = rank_dirs(run_dir)
    if ranks:
        analysis = _analyze_ranks(run_dir, ranks, traces)
    else:
        folder = RunFolder(run_dir)
        samples, stacks = _optional(folder.samples, Samples), _optional(folder.stacks, StackSamples)
        analysis = analyze(Inputs(load_trace(traces[-1]), capture, samples, stacks))
    if analysis is not None:
        write_json(RunFolder(run_dir).analysis, analysis)
    return analysis


def _analyze_ranks(run_dir: Path, ranks: dict[int, Path], traces: list[Path]) -> Optional[Analysis]:
    """Each rank with its own capture, samples and trace (tb/rankN.*), then the job's view of them all."""
    analyses = []
    for rank, folder in ranks.items():
        mine = [p for p in traces if p.name.startswith(f"rank{rank}.")]
        if not mine:
            continue  # a rank that failed before its profiler stopped wrote no trace
        files = RunFolder(folder)
        inputs = Inputs(load_trace(mine[-1]), _optional(files.capture, Capture), _optional(files.samples, Samples),
                        _optional(files.stacks, StackSamples))
        analyses.append((rank, str(mine[-1].relative_to(run_dir)), analyze(inputs)))
    if not analyses:
        return None
    return analyses[0][2] if len(analyses) == 1 else combine(analyses)[1]


TRACE_SUFFIXES = (".json", ".json.gz")


def find_traces(path: Path) -> list[Path]:
    """PATH is one trace file, or a folder of them (one per rank or worker, as tensorboard_trace_handler
    writes them)."""
    if not path.exists():
        raise UserError(f"trace not found: {path}", "pass a torch.profiler trace (.json or .json.gz) or a folder of them")
    if path.is_file():
        return [path]
    if RunFolder(path).tb.is_dir() and not any(path.glob("*.pt.trace.json*")):
        path = RunFolder(path).tb  # a run folder of `diagnose run`
    found = sorted(p for p in path.iterdir() if p.is_file() and p.name.endswith(TRACE_SUFFIXES))
    profiler_named = [p for p in found if p.name.endswith((".pt.trace.json", ".pt.trace.json.gz"))]
    found = profiler_named or found  # other .json files beside the profiler's (configs, notes) are not traces
    if not found:
        raise UserError(f"no trace files (.json, .json.gz) in {path}", "pass a trace file or the folder the profiler wrote")
    return found


def _source_roots(trace: Path) -> tuple[str, ...]:
    """Where a trace's relative source paths may be found: the current folder, or near the trace (a log folder
    beside the training script, as TensorBoard's handler is usually pointed at)."""
    return (os.getcwd(), *(str(p) for p in trace.resolve().parents[:3]))


def analyze_traces(paths: list[Path]) -> Analysis:
    """Traces of one job: each analysed alone, then combined (per-rank table, the rank to diagnose)."""
    analyses = []
    for index, path in enumerate(paths):
        trace = load_trace(path)
        analyses.append((rank_of(trace, index), str(path), analyze(Inputs(trace, source_roots=_source_roots(path)))))
    if len(analyses) == 1:
        return analyses[0][2]
    ranks = [r for r, _, _ in analyses]
    if len(set(ranks)) < len(ranks):  # e.g. several traces of one process, not one per rank
        analyses = [(i, p, a) for i, (_, p, a) in enumerate(analyses)]
    return combine(analyses)[1]


def _optional(path: Path, cls):
    return read_json(path, cls) if path.exists() else None


def load_rules(rules_dirs) -> list[rule_engine.Rule]:
    """The bundled rules and those in rules_dirs, checked against the optimizations' registry."""
    return rule_engine.load_rules((Path(d) for d in rules_dirs), optimization_ids=REGISTRY)


def diagnose_analysis(analysis: Optional[Analysis], rules_dirs: tuple[str, ...]) -> list[Finding]:
    if analysis is None or not analysis.steps:
        return []
    findings = rule_engine.evaluate(load_rules(rules_dirs), analysis)
    if len(analysis.ranks) > 1:  # the findings are about one rank of several: say which
        rank = int(analysis.metrics["rank"])
        findings = [replace(f, message=f"rank {rank}: {f.message}") for f in findings]
    return findings


def build_diagnosis(script: str, capture: Optional[Capture], analysis: Optional[Analysis], findings: list[Finding],
                    experiments: ExperimentResults) -> Diagnosis:
    empty = {"mean": 0.0, "p50": 0.0, "p95": 0.0, "unprofiled": None}
    return Diagnosis(
        schema=1,
        script=script,
        steps_profiled=len(analysis.steps) if analysis else 0,
        step_time_s=analysis.step_time_s if analysis else empty,
        breakdown=analysis.breakdown if analysis else {},
        findings=tuple(findings),
        experiments=experiments.experiments,
        status=capture.status if capture else ("analyzed" if analysis is not None else "no_capture"),
        metrics=analysis.metrics if analysis else {},
        headline=experiments.headline,
        ranks=analysis.ranks if analysis else (),
        experiments_interrupted=experiments.interrupted,
        phases=analysis.phases if analysis else (),
        budget=experiments.budget,
    )


@dataclass(frozen=True)
class ExperimentResults:
    """RUN/experiments.json: every setting tried and the headline."""
    experiments: tuple[Experiment, ...] = ()
    headline: Optional[Headline] = None
    interrupted: bool = False  # Ctrl-C during the experiments: what was measured until then is kept
    budget: Optional[BudgetReport] = None


def diagnose_capture(run_dir: Path, capture: Optional[Capture], rules_dirs: tuple[str, ...]):
    analysis = analyze_run(run_dir, capture)
    return analysis, diagnose_analysis(analysis, rules_dirs)


def can_experiment(capture: Optional[Capture], analysis: Optional[Analysis]) -> bool:
    return capture is not None and Status.is_ok(capture.status) and analysis is not None and len(analysis.steps) > 0


def run_experiments_stage(selection: str, run_dir: Path, capture: Capture, analysis: Analysis, findings: list[Finding],
                          budget_s: float, on_progress, on_message=lambda text: None) -> ExperimentResults:
    from diagnose.experiments.stage import run_experiments

    outcome = run_experiments(selection, capture, analysis, findings, run_dir, budget_s, on_progress, on_message)
    results = ExperimentResults(tuple(outcome.experiments), outcome.headline, outcome.interrupted, outcome.budget)
    write_json(RunFolder(run_dir).experiments, results)
    return results


def write_outputs(run_dir: Path, script: str, capture: Optional[Capture], analysis: Optional[Analysis],
                  findings: list[Finding], experiments: ExperimentResults, templates_dir: Optional[str] = None,
                  trace_files: Optional[tuple[str, ...]] = None, tensorboard_dir: str = "") -> RunResult:
    from diagnose.report.render import write_reports

    diagnosis = build_diagnosis(script, capture, analysis, findings, experiments)
    write_json(RunFolder(run_dir).diagnosis, diagnosis)
    report = write_reports(run_dir, capture, analysis, diagnosis, templates_dir, trace_files, tensorboard_dir)
    return RunResult(run_dir, capture, analysis, diagnosis, report)


def finish_run(run_dir: Path, script: str, capture: Optional[Capture], rules_dirs: tuple[str, ...],
               templates_dir: Optional[str] = None) -> RunResult:
    """Analysis, rules and report for a run folder whose capture is done (or partial); experiments already
    run for it (RUN/experiments.json) are kept."""
    analysis, findings = diagnose_capture(run_dir, capture, rules_dirs)
    saved = RunFolder(run_dir).experiments
    experiments = read_json(saved, ExperimentResults) if saved.exists() else ExperimentResults()
    return write_outputs(run_dir, script, capture, analysis, findings, experiments, templates_dir)


def load_capture(run_dir: Path) -> Optional[Capture]:
    if not run_dir.is_dir():
        raise UserError(f"run folder not found: {run_dir}", "pass a folder written by `diagnose run`")
    path = RunFolder(run_dir).capture
    return read_json(path, Capture) if path.exists() else None
