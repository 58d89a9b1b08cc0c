"""The short result a notebook shows inline (`_repr_html_`) and a terminal prints: the verdict, the step's
breakdown, the findings with their fixes and verified speedups, and where the full report is. Selection and
wording only; the template (templates/inline.html.j2) places them."""
from __future__ import annotations

import io
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import diagnose.report.charts as charts
from diagnose.model import Comparison, Diagnosis
from diagnose.report.view import FindingView, StepTimeView, experiment_views, finding_view, step_time_view
from diagnose.report.wording import headline_sentence

ACCENTS = {"ok": "#2a9d4b", "high": "#c0392b", "medium": "#d68910", "error": "#c0392b"}  # as report.css's verdicts


@dataclass(frozen=True)
class InlineView:
    title: str
    verdict: str
    accent: str  # the verdict's colour: green for a healthy run, red/amber for a bottleneck, grey otherwise
    headline: str  # the verified changes together, or ""
    step: Optional[StepTimeView]
    breakdown_svg: str  # the step's share by bucket, or "" when no step was measured
    findings: tuple[FindingView, ...]
    report_uri: str  # file:// link to report.html, or "" when none was written
    run_dir: str


def inline_view(diagnosis: Diagnosis, verdict: str, verdict_style: str, run_dir: Path,
                report_path: Optional[Path]) -> InlineView:
    experiments = experiment_views(diagnosis.experiments)
    return InlineView(
        title=f"diagnose: {Path(diagnosis.script).name}",
        verdict=verdict,
        accent=ACCENTS.get(verdict_style, "#888"),
        headline=headline_sentence(diagnosis),
        step=step_time_view(diagnosis) if diagnosis.breakdown else None,
        breakdown_svg=charts.breakdown_bar(diagnosis.breakdown) if diagnosis.breakdown else "",
        findings=tuple(finding_view(f, diagnosis, experiments) for f in diagnosis.findings),
        report_uri=report_path.resolve().as_uri() if report_path and report_path.exists() else "",
        run_dir=str(run_dir),
    )


def render_inline_html(view: InlineView, templates_dir: Optional[str] = None) -> str:
    from diagnose.report.render import template_environment

    return template_environment(templates_dir).get_template("inline.html.j2").render(view=view)


def summary_text(diagnosis: Diagnosis, verdict: str, status: str, run_dir: Path, report_path: Optional[Path]) -> str:
    """The terminal summary `diagnose run` prints at its end, as plain text."""
    from rich.console import Console

    from diagnose.report.terminal import print_summary

    console = Console(file=io.StringIO(), width=120, record=True, color_system=None, force_jupyter=False)
    print_summary(console, diagnosis, verdict, status, run_dir, report_path)
    return console.export_text().strip("\n")


def comparison_text(comparison: Comparison, html_path: Optional[Path]) -> str:
    from rich.console import Console

    from diagnose.report.comparison import print_comparison

    console = Console(file=io.StringIO(), width=120, record=True, color_system=None, force_jupyter=False)
    print_comparison(console, comparison, html_path)
    return console.export_text().strip("\n")


def render_comparison_inline(text: str, html_path: Optional[Path], templates_dir: Optional[str] = None) -> str:
    from diagnose.report.render import template_environment

    return template_environment(templates_dir).get_template("compare_inline.html.j2").render(
        text=text, report_uri=html_path.resolve().as_uri() if html_path else "")
