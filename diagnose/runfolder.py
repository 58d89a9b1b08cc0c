"""What makes a folder diagnose's own run folder: the commands that write into an existing folder (`report`,
`capture` under the user's launcher) refuse any other, so the user's files are never overwritten."""
from __future__ import annotations

from pathlib import Path

# everything diagnose writes at the top of a run folder (temporary files of atomic writes end in .tmp)
OWN_ENTRIES = frozenset({
    "config.json", "capture.json", "samples.json", "stacks.json", "analysis.json", "diagnosis.json", "report.html",
    "report.css", "experiments.json", "launcher.json", "script.log", "progress.fifo", "ranks", "tb", "sandbox",
    "experiments", "measure.json", "compare.json", "compare.html"})


def has_own_config(run_dir: Path) -> bool:
    """config.json as diagnose writes it (a RunConfig), not some other program's config.json."""
    from diagnose.model import RunConfig
    from diagnose.serial import read_json

    try:
        read_json(run_dir / "config.json", RunConfig)
        return True
    except Exception:  # missing, unreadable, or another program's file: not ours either way
        return False


def foreign_entries(run_dir: Path) -> list[str]:
    """Names at the top of run_dir that diagnose did not write."""
    if not run_dir.is_dir():
        return []
    names = sorted(p.name for p in run_dir.iterdir() if p.name not in OWN_ENTRIES and not p.name.endswith(".tmp"))
    if (run_dir / "config.json").exists() and not has_own_config(run_dir):
        names.insert(0, "config.json")
    return names
