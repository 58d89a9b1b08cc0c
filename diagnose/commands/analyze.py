"""`diagnose analyze`: the same diagnosis and report for traces people already have (no script, no re-run).
Imports nothing that loads torch: a big trace should cost its parsing, not a framework start-up."""
from __future__ import annotations

import contextlib
import gc
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Optional

from rich.console import Console

from diagnose.analysis.sources import analyze_traces, default_jobs, find_traces
from diagnose.commands.output import check_out_dir, new_run_dir
from diagnose.commands.pipeline import RunResult, diagnose_analysis, write_outputs
from diagnose.commands.rules import load_rules
from diagnose.model import ExperimentResults, Status
from diagnose.record.run_record import RunRecord
from diagnose.report.terminal import print_summary
from diagnose.report.wording import verdict
from diagnose.serial import dumps
from diagnose.trace.prefetch import MAX_EVENTS

if TYPE_CHECKING:
    from diagnose.trace import ReadAhead


def analyze_command(path: Path, *, out: Optional[str], rules_dirs: tuple[str, ...], templates_dir: Optional[str],
                    as_json: bool, open_report: bool, jobs: Optional[int] = None,
                    max_events: int = MAX_EVENTS, ahead: Optional[ReadAhead] = None) -> int:
    return analyze_and_report(path, out=out, rules_dirs=rules_dirs, templates_dir=templates_dir, as_json=as_json,
                              open_report=open_report, jobs=jobs, max_events=max_events, ahead=ahead)[1]


def analyze_and_report(path: Path, *, out: Optional[str], rules_dirs: tuple[str, ...] = (),
                       templates_dir: Optional[str] = None, as_json: bool = False, open_report: bool = False,
                       jobs: Optional[int] = None, max_events: int = MAX_EVENTS, into: Optional[Path] = None,
                       script: str = "", ahead: Optional[ReadAhead] = None) -> tuple[RunResult, int]:
    """The analysis as `diagnose analyze` prints it; the result (its folder, diagnosis) and the exit code.
    `into`: a folder of diagnose's own that already holds the traces (a profiled window's run folder), written into
    in place of a new one; `script`: what the diagnosis names as its script (default: PATH); `ahead`: PATH's
    reading, begun while diagnose was importing (trace.load.begin_reading)."""
    traces = find_traces(path)
    load_rules(rules_dirs)  # a broken rule file fails before the parsing
    check_out_dir(None if into else out)  # as does a used --out: a big trace takes minutes to read
    console = Console(stderr=True)
    with _spinner(console, f"analysing {len(traces)} trace(s)"), no_gc():
        analysis = analyze_traces(traces, jobs or default_jobs(), max_events, ahead)
    run_dir = into or new_run_dir(out, f"analyze-{stem(path)}")
    RunRecord(run_dir).save_analysis(analysis)
    findings = diagnose_analysis(analysis, rules_dirs)
    result = write_outputs(run_dir, script or str(path), None, analysis, findings, ExperimentResults(), templates_dir,
                           trace_files=tuple(str(p.resolve()) for p in traces),
                           tensorboard_dir=_tensorboard_dir(traces))
    status = f"Analysed {len(analysis.steps)} step(s) from {len(traces)} trace(s): {analysis.step_definition}."
    print_summary(console, result.diagnosis, verdict(result.diagnosis, analysis), status, run_dir, result.report_path)
    if as_json:
        sys.stdout.write(dumps(result.diagnosis).decode() + "\n")
    if open_report and result.report_path:
        import webbrowser

        webbrowser.open(result.report_path.resolve().as_uri())
    return result, Status.COMPLETED.exit_code if analysis.steps else Status.NO_STEPS.exit_code  # as a run would


def _spinner(console: Console, text: str):
    """A spinner on a terminal; elsewhere (a pipe, CI, a log) it shows nothing, and its import (rich's live display,
    10 ms) is not paid."""
    return console.status(text) if console.is_terminal else contextlib.nullcontext()


@contextlib.contextmanager
def no_gc():
    """Parsing creates millions of objects and frees none: the cyclic collector would only rescan them."""
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def _tensorboard_dir(traces: list[Path]) -> str:
    """torch-tb-profiler lists only files named *.pt.trace.json[.gz], from one folder."""
    folders = {p.resolve().parent for p in traces}
    named = all(p.name.endswith((".pt.trace.json", ".pt.trace.json.gz")) for p in traces)
    return str(folders.pop()) if named and len(folders) == 1 else ""


def stem(path: Path) -> str:
    name = path.name
    for suffix in (".gz", ".json", ".pt.trace"):
        name = name.removesuffix(suffix)
    return name or "trace"
