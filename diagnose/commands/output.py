"""What every command shares for its output: a new run folder (never an existing one with files in it), the
progress bar, and the summary printed at the end."""
from __future__ import annotations

import datetime as dt
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Optional

from rich.console import Console

if TYPE_CHECKING:
    import rich.progress

from diagnose.errors import UserError
from diagnose.report.terminal import print_summary
from diagnose.report.wording import status_sentence, verdict
from diagnose.serial import dumps


def check_out_dir(out: Optional[str]) -> None:
    """--out must be new or empty: checked before any long work, so a refusal costs nothing."""
    if out:
        path = Path(out)
        if path.exists() and (not path.is_dir() or any(path.iterdir())):
            raise UserError(f"--out {out} already exists and is not empty",
                            "choose a new folder; diagnose never overwrites files")


def new_run_dir(out: Optional[str], name: str) -> Path:
    """--out, or diagnose_runs/<timestamp>-<name>[-N]; made now."""
    check_out_dir(out)
    if out:
        path = Path(out)
    else:
        stamp = dt.datetime.now().strftime("%Y-%m-%dT%H-%M-%S")
        path = Path("diagnose_runs") / f"{stamp}-{name}"
        suffix = 1
        while path.exists():
            suffix += 1
            path = Path("diagnose_runs") / f"{stamp}-{name}-{suffix}"
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UserError(f"cannot create the run folder {path}: {exc.strerror}",
                        "pass --out a folder you can write to (it is made for you)") from None
    return path


def progress_bar(console: Console) -> "rich.progress.Progress":
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn  # (run only)

    return Progress(TextColumn("  {task.description:<12}"), BarColumn(), MofNCompleteColumn(),
                    TextColumn("{task.fields[note]}"), TimeElapsedColumn(), console=console, transient=False)


def finish_output(console: Console, result, as_json: bool, open_report: bool) -> None:
    print_summary(console, result.diagnosis, verdict(result.diagnosis, result.analysis),
                  status_sentence(result.capture, result.analysis), result.run_dir, result.report_path,
                  len(result.capture.redirected_writes) if result.capture else 0,
                  result.capture.unrestored_files if result.capture else ())
    if as_json:
        sys.stdout.write(dumps(result.diagnosis).decode() + "\n")
        sys.stdout.flush()
    if open_report and result.report_path:
        import webbrowser

        webbrowser.open(result.report_path.resolve().as_uri())
