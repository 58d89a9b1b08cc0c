"""`diagnose report RUN`: analyse a run folder again (new rules, new templates) and re-render its report."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

from rich.console import Console

from diagnose.analysis.sources import default_jobs
from diagnose.commands.output import finish_output
from diagnose.commands.pipeline import finish_run
from diagnose.model import Status
from diagnose.record.run_record import RunRecord


def report_command(run_dir: Path, rules_dirs, templates_dir, as_json: bool, jobs: Optional[int] = None) -> int:
    capture = _finished_capture(run_dir)
    script = capture.script if capture else str(run_dir)
    result = finish_run(run_dir, script, capture, tuple(rules_dirs), templates_dir, jobs or default_jobs())
    finish_output(Console(stderr=True), result, as_json, False)
    return Status.exit_code_of(result.diagnosis.status)  # as `diagnose run` exited for this run


def _finished_capture(run_dir: Path):
    """The run's capture. Ranks captured under the user's own launcher (`diagnose capture`) each left theirs:
    this command is where the job is known to be over, so it merges them into RUN/capture.json."""
    return RunRecord.existing(run_dir).merge_rank_captures()
