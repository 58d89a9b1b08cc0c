"""What diagnose.run / analyze / compare return: the records diagnosis.json and compare.json hold, with their
folder and exit code. They print as the terminal summary and render inline in a notebook (_repr_html_)."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

from diagnose.lean_dataclass import dataclass
from diagnose.model import Comparison, Diagnosis, Experiment, Finding
from diagnose.record.run_record import RunRecord


@dataclass(frozen=True)
class Result:
    """A diagnosis (diagnosis.json) and the run folder that holds its report and traces."""
    run_dir: str
    diagnosis: Diagnosis
    exit_code: int  # as `diagnose run` / `analyze` would exit: 0 done, 1 the script raised, 3 no step, ...
    verdict: str  # the one sentence the report opens with
    verdict_style: str  # ok | high | medium | error | neutral
    status: str  # what ran: "Timed 20 steps without the profiler ..., then profiled 20 ..."
    report: str = ""  # report.html, or "" when none was written

    @property
    def path(self) -> Path:
        return Path(self.run_dir)

    @property
    def findings(self) -> tuple[Finding, ...]:
        return self.diagnosis.findings

    @property
    def experiments(self) -> tuple[Experiment, ...]:
        return self.diagnosis.experiments

    @classmethod
    def from_pipeline(cls, result, exit_code: int) -> "Result":
        """From the pipeline's own record (diagnose.commands.pipeline.RunResult) as a command finished it."""
        from diagnose.report.view import verdict_style
        from diagnose.report.wording import status_sentence, verdict

        return cls(str(result.run_dir), result.diagnosis, exit_code, verdict(result.diagnosis, result.analysis),
                   verdict_style(result.diagnosis, result.analysis),
                   status_sentence(result.capture, result.analysis), str(result.report_path or ""))

    @classmethod
    def load(cls, run_dir) -> "Result":
        """The result a run folder holds (its diagnosis.json and analysis.json), without analysing anything."""
        from diagnose.errors import UserError
        from diagnose.model import Status
        from diagnose.report.view import verdict_style
        from diagnose.report.wording import status_sentence, verdict

        record = RunRecord(run_dir)
        diagnosis = record.diagnosis()
        if diagnosis is None:
            raise UserError(f"{run_dir} holds no diagnosis.json", "pass a folder written by diagnose")
        analysis, capture = record.analysis(), record.capture()
        code = Status.exit_code_of(diagnosis.status)
        if diagnosis.status == Status.ANALYZED:  # as `diagnose analyze` exits: done, or no step in the traces
            code = Status.COMPLETED.exit_code if diagnosis.steps_profiled else Status.NO_STEPS.exit_code
        return cls(str(run_dir), diagnosis, code, verdict(diagnosis, analysis),
                   verdict_style(diagnosis, analysis), status_sentence(capture, analysis),
                   str(record.report_path() or ""))

    def __str__(self) -> str:
        from diagnose.report.inline import summary_text

        return summary_text(self.diagnosis, self.verdict, self.status, Path(self.run_dir), self._report_path())

    def _repr_pretty_(self, printer, cycle: bool) -> None:
        printer.text(str(self))  # IPython's plain-text display: the summary, not the dataclass's fields

    def _repr_html_(self) -> str:
        from diagnose.report.inline import inline_view, render_inline_html

        return render_inline_html(inline_view(self.diagnosis, self.verdict, self.verdict_style, Path(self.run_dir),
                                              self._report_path()))

    def _report_path(self) -> Optional[Path]:
        return Path(self.report) if self.report else None


@dataclass(frozen=True)
class ComparisonResult:
    """B against A (compare.json), with the folder that holds compare.html."""
    out_dir: str
    comparison: Comparison
    exit_code: int  # 0 done, 4 B slower than fail_if_slower allows

    @property
    def path(self) -> Path:
        return Path(self.out_dir)

    @property
    def report(self) -> str:
        return str(RunRecord(self.path).compare_report_path() or "")

    def __str__(self) -> str:
        from diagnose.report.inline import comparison_text

        return comparison_text(self.comparison, Path(self.report) if self.report else None)

    def _repr_pretty_(self, printer, cycle: bool) -> None:
        printer.text(str(self))

    def _repr_html_(self) -> str:
        from diagnose.report.inline import render_comparison_inline

        return render_comparison_inline(str(self), Path(self.report) if self.report else None)
