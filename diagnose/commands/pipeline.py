"""The pipeline: capture -> analysis -> rules -> verdict -> report. Each stage reads what the previous one wrote
into the run folder, so `diagnose report RUN` can re-run everything after the capture."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

from diagnose import rules as rule_engine
from diagnose.analysis.sources import analyze_run, traces_not_summarized
from diagnose.commands.rules import load_rules
from diagnose.lean_dataclass import dataclass
from diagnose.model import Analysis, Capture, CostInputs, Diagnosis, ExperimentResults, Finding, Status
from diagnose.record.run_record import RunRecord
from diagnose.verdict.diagnosis import build_diagnosis


@dataclass(frozen=True)
class RunResult:
    run_dir: Path
    capture: Optional[Capture]
    analysis: Optional[Analysis]
    diagnosis: Diagnosis
    report_path: Optional[Path]


def diagnose_analysis(analysis: Optional[Analysis], rules_dirs: tuple[str, ...]) -> list[Finding]:
    return rule_engine.findings_for(analysis, load_rules(rules_dirs))


def _cost_inputs(run_dir: Path) -> CostInputs:
    """The run's length and prices as `diagnose run` was given them (config.json), so `diagnose report` re-renders
    the same costs; none for traces analysed without a run."""
    record = RunRecord(run_dir)
    if not record.has_own_config():
        return CostInputs()
    return record.config().cost


def diagnose_capture(run_dir: Path, capture: Optional[Capture], rules_dirs: tuple[str, ...], jobs: int = 1):
    """Analysis (the ranks' traces in `jobs` worker processes), kept in RUN/analysis.json, and the rules'
    findings; the traces are relabelled for TensorBoard first."""
    record = RunRecord(run_dir)
    relabel_for_tensorboard(traces_not_summarized(record))
    analysis = analyze_run(record, capture, jobs)
    if analysis is not None:
        record.save_analysis(analysis)
    return analysis, diagnose_analysis(analysis, rules_dirs)


def relabel_for_tensorboard(traces: list[Path]) -> None:
    """Relabel the DataLoader's spans so TensorBoard's Overview shows the data-loading time we measured; a trace
    big enough to be streamed is left as written (the relabelling reads and rewrites the whole text)."""
    from diagnose.tbcompat import adapt_trace_for_tensorboard
    from diagnose.trace import text_is_big

    for path in traces:
        if not text_is_big(path):
            adapt_trace_for_tensorboard(path)


def can_experiment(capture: Optional[Capture], analysis: Optional[Analysis]) -> bool:
    """A run whose profiled steps are whole; or one that ran out of memory, for the changes that make it fit."""
    if capture is not None and capture.status == Status.OUT_OF_MEMORY:
        return True
    return capture is not None and Status.is_ok(capture.status) and analysis is not None and len(analysis.steps) > 0


def run_experiments_stage(selection: str, capture: Capture, analysis: Analysis, findings: list[Finding], run_dir: Path,
                          budget_s: float, on_progress, on_message=lambda text: None) -> ExperimentResults:
    """The experiments stage, its arguments in its own order, its results kept in RUN/experiments.json."""
    from diagnose.experiments.stage import run_experiments

    outcome = run_experiments(selection, capture, analysis, findings, run_dir, budget_s, on_progress, on_message)
    results = ExperimentResults(tuple(outcome.experiments), outcome.headline, outcome.interrupted, outcome.budget,
                                outcome.batch_search)
    results = hand_back_changes(run_dir, results, capture, analysis)
    RunRecord(run_dir).save_experiments(results)
    return results


def hand_back_changes(run_dir: Path, results: ExperimentResults, capture: Capture,
                      analysis: Optional[Analysis]) -> ExperimentResults:
    """Each measured change as a patch of the user's files as they were when the run started (RUN/sources.json;
    a run without it, as the files are now), RUN/verified.patch for the verified one."""
    from diagnose.capture.sources import snapshot
    from diagnose.experiments.patches import write_hand_backs
    from diagnose.optimizations.base import Context

    if not any(e.changes for e in results.experiments):
        return results
    sources = RunRecord(run_dir).sources() or snapshot(capture.script)
    return write_hand_backs(run_dir, results, Context(capture, analysis), sources)


def write_outputs(run_dir: Path, script: str, capture: Optional[Capture], analysis: Optional[Analysis],
                  findings: list[Finding], experiments: ExperimentResults, templates_dir: Optional[str] = None,
                  trace_files: Optional[tuple[str, ...]] = None, tensorboard_dir: str = "") -> RunResult:
    from diagnose.report.render import write_reports

    diagnosis = build_diagnosis(script, capture, analysis, findings, experiments, _cost_inputs(run_dir))
    RunRecord(run_dir).save_diagnosis(diagnosis)
    report = write_reports(run_dir, capture, analysis, diagnosis, templates_dir, trace_files, tensorboard_dir)
    return RunResult(run_dir, capture, analysis, diagnosis, report)


def finish_run(run_dir: Path, script: str, capture: Optional[Capture], rules_dirs: tuple[str, ...],
               templates_dir: Optional[str] = None, jobs: int = 1) -> RunResult:
    """Analysis, rules and report for a run folder whose capture is done (or partial); experiments already
    run for it (RUN/experiments.json) are kept."""
    analysis, findings = diagnose_capture(run_dir, capture, rules_dirs, jobs)
    experiments = RunRecord(run_dir).experiments() or ExperimentResults()
    return write_outputs(run_dir, script, capture, analysis, findings, experiments, templates_dir)
