"""Assemble what the report shows from the pipeline's records. Selection and wording, no measurement."""
from __future__ import annotations

import datetime as dt
import linecache
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from diagnose import __version__
from diagnose.model import BUCKETS, Analysis, Capture, Diagnosis, Finding, Samples
from diagnose.report import charts
from diagnose.report.wording import CATEGORY_NAMES, status_sentence, verdict

SNIPPET_CONTEXT = 2


@dataclass(frozen=True)
class Snippet:
    start_line: int
    lines: tuple[str, ...]
    highlight: int


@dataclass(frozen=True)
class FindingView:
    finding: Finding
    category_name: str
    snippet: Optional[Snippet]


@dataclass(frozen=True)
class ReportView:
    title: str
    generated: str
    version: str
    run_dir: str
    verdict: str
    status: str
    status_sentence: str
    diagnosis: Diagnosis
    capture: Optional[Capture]
    analysis: Optional[Analysis]
    findings: tuple[FindingView, ...]
    trace_files: tuple[str, ...]
    charts: dict[str, str] = field(default_factory=dict)
    bucket_labels: dict[str, str] = field(default_factory=dict)


def snippet(location: Optional[str]) -> Optional[Snippet]:
    if not location:
        return None
    path, _, line = location.rpartition(":")
    if not line.isdigit() or not Path(path).is_file():
        return None
    target = int(line)
    start = max(1, target - SNIPPET_CONTEXT)
    lines = tuple(linecache.getline(path, n).rstrip("\n") for n in range(start, target + SNIPPET_CONTEXT + 1))
    return Snippet(start, lines, target)


def build_view(run_dir: Path, capture: Optional[Capture], analysis: Optional[Analysis], diagnosis: Diagnosis,
               samples: Optional[Samples]) -> ReportView:
    return ReportView(
        title=f"diagnose: {Path(diagnosis.script).name}",
        generated=dt.datetime.now().strftime("%Y-%m-%d %H:%M:%S"),
        version=__version__,
        run_dir=str(run_dir),
        verdict=verdict(diagnosis, analysis),
        status=diagnosis.status,
        status_sentence=status_sentence(capture, analysis),
        diagnosis=diagnosis,
        capture=capture,
        analysis=analysis,
        findings=tuple(FindingView(f, CATEGORY_NAMES[f.category], snippet(f.location)) for f in diagnosis.findings),
        trace_files=tuple(str(p.relative_to(run_dir)) for p in sorted((run_dir / "tb").glob("*.json*"))),
        charts={**_charts(analysis), **utilization_charts(samples)},
        bucket_labels=charts.LABELS,
    )


def _charts(analysis: Optional[Analysis]) -> dict[str, str]:
    if analysis is None or not analysis.steps:
        return {}
    result = {
        "breakdown": charts.breakdown_bar(analysis.breakdown),
        "steps": charts.steps_chart([s.duration_s * 1e3 for s in analysis.steps],
                                    {b: [s.buckets_s[b] * 1e3 for s in analysis.steps] for b in BUCKETS}),
    }
    return result


def utilization_charts(samples: Optional[Samples]) -> dict[str, str]:
    if samples is None or not samples.t_s:
        return {}
    pct = lambda values: [None if v is None else 100 * v for v in values]  # noqa: E731
    result = {"cpu": charts.utilization_chart(
        samples.t_s, {"this training (process + workers)": pct(samples.process_cpu_frac), "whole machine": pct(samples.cpu_frac)},
        samples.window_s, "CPU %")}
    if samples.gpu_util_frac and any(v is not None for v in samples.gpu_util_frac):
        total = samples.gpu_mem_total_bytes or 1
        result["gpu"] = charts.utilization_chart(
            samples.t_s, {"GPU utilization (NVML)": pct(samples.gpu_util_frac),
                          "GPU memory used": [None if v is None else 100 * v / total for v in samples.gpu_mem_used_bytes]},
            samples.window_s, "%")
    return result

