"""What the command line asked for beyond the run itself, as records the CLI builds once at its edge."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Optional


@dataclass(frozen=True)
class OutputOptions:
    """Where the rules and templates come from and how the result is shown."""
    rules_dirs: tuple[str, ...] = ()
    templates_dir: Optional[str] = None
    as_json: bool = False  # diagnosis.json (or compare.json) to stdout
    open_report: bool = False  # the report in a browser when done


@dataclass(frozen=True)
class BaselineGate:
    """`run --baseline`: an earlier run to compare with, and the CI gate on the comparison."""
    baseline: Optional[Path] = None
    fail_if_slower: Optional[float] = None  # percent beyond the noise: exit 4
    run_noise: Optional[float] = None  # percent of run-to-run variation the user measured
    baseline_ref: Optional[str] = None  # `run --baseline-ref REV`: the script at this git revision, interleaved
