"""The short terminal summary printed at the end of a run (rich)."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

from rich.console import Console

from diagnose.model import Diagnosis
from diagnose.report.wording import CATEGORY_NAMES

STYLE = {"high": "bold red", "medium": "yellow", "low": "dim"}


def print_summary(console: Console, diagnosis: Diagnosis, verdict: str, status: str, run_dir: Path,
                  report: Optional[Path]) -> None:
    console.print()
    console.print(status, style="dim")
    console.print(verdict, style="bold")
    if diagnosis.breakdown:
        parts = " · ".join(f"{k.replace('_', ' ')} {v:.0%}" for k, v in diagnosis.breakdown.items() if v >= 0.005)
        console.print(f"  step {diagnosis.step_time_s['mean'] * 1e3:.1f} ms: {parts}")
    for f in diagnosis.findings:
        console.print(f"  [{STYLE[f.severity]}]{f.severity:<6}[/] {f.cost_fraction:>4.0%}  {f.title} "
                      f"[dim]({CATEGORY_NAMES[f.category]})[/]", highlight=False)
        if f.location:
            console.print(f"               at {f.location}", highlight=False, soft_wrap=True)
    if report:
        console.print(f"Report:  {report}")
    if (run_dir / "tb").is_dir():
        console.print(f"Traces:  tensorboard --logdir {run_dir / 'tb'}")
