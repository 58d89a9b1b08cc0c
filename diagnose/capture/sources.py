"""The user's source files as they were when the run started: a sha256 of each Python file of the script's folder
(and the folders under it), kept in RUN/sources.json. A change the run measured is handed back as a patch of these
files; `diagnose apply` refuses a file whose hash has changed since."""
from __future__ import annotations

import hashlib
import os
from pathlib import Path

from diagnose.model import SourceFiles

MAX_FILES = 2000  # a repository's worth of Python: past it, the script's own file and its folder's are kept
MAX_BYTES = 5_000_000  # a file larger than this is data, not the code a change edits
# folders that hold no code of the user's: environments, caches, diagnose's own runs
SKIPPED_DIRS = {"__pycache__", "node_modules", "site-packages", "diagnose_runs", "build", "dist"}


def sha256_of(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def relative_to(path: Path, folder: Path) -> str | None:
    """`path` relative to `folder` as a patch names it (forward slashes), None when it lies outside."""
    try:
        return Path(os.path.abspath(path)).relative_to(Path(os.path.abspath(folder))).as_posix()
    except ValueError:
        return None


def _is_environment(folder: Path) -> bool:
    return (folder / "pyvenv.cfg").exists() or (folder / "conda-meta").is_dir()


def _python_files(top: Path) -> list[Path]:
    found: list[Path] = []
    for root, dirs, files in os.walk(top):
        here = Path(root)
        dirs[:] = sorted(d for d in dirs if not d.startswith(".") and d not in SKIPPED_DIRS
                         and not _is_environment(here / d))
        found += [here / f for f in sorted(files) if f.endswith(".py")]
        if len(found) > MAX_FILES:
            break
    return found


def snapshot(script: str, folder: Path | None = None) -> SourceFiles:
    """The hashes of the script and of the Python files in its folder and below (those a change may edit: the
    DataLoader's or the optimizer's line, the TrainingArguments(...) call), relative to `folder`, the folder the run
    starts in."""
    folder = Path(os.path.abspath(folder or Path.cwd()))
    script_path = Path(os.path.abspath(script))
    files = _python_files(script_path.parent)
    note = ""
    if len(files) > MAX_FILES:
        files = sorted(script_path.parent.glob("*.py"))
        note = (f"over {MAX_FILES} Python files under {script_path.parent}: only the script's own folder was "
                "recorded")
    hashes: dict[str, str] = {}
    for path in [script_path, *files]:
        name = relative_to(path, folder)
        if name is None or name in hashes:
            continue
        try:
            if path.stat().st_size <= MAX_BYTES:
                hashes[name] = sha256_of(path)
        except OSError:
            continue  # unreadable, or gone between the walk and the read: no change is handed back for it
    return SourceFiles(folder=str(folder), sha256=hashes, note=note)
