"""`diagnose compare --live A.py B.py` and `diagnose run --baseline-ref REV`: the interleaved CI gate. The baseline
is code, not an old folder: both versions run in this one job, taking turns (compare/live.py)."""
from __future__ import annotations

import io
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator, Optional

from rich.console import Console

from diagnose.capture.compile_cache import private_compile_cache
from diagnose.capture.runner import check_script
from diagnose.commands.output import check_out_dir, new_run_dir
from diagnose.compare.live import LiveInterrupted, SideToRun, compare_live
from diagnose.errors import UserError
from diagnose.model import LiveComparison, Status
from diagnose.record.run_record import RunRecord
from diagnose.report.live import print_live
from diagnose.serial import dumps

EXIT_SLOWER = 4  # as `diagnose compare --fail-if-slower`
GIT_TIMEOUT_S = 120.0


def live_command(a_script: str, b_script: str, script_args: tuple[str, ...], *, out: Optional[str],
                 budget_s: float, fail_if_slower: Optional[float], as_json: bool) -> tuple[LiveComparison, Path, int]:
    """`diagnose compare --live`: the comparison, its folder and the exit code."""
    check_out_dir(out)
    for script in (a_script, b_script):
        check_script(script)
    out_dir = new_run_dir(out, f"compare-live-{Path(a_script).stem}-vs-{Path(b_script).stem}")
    a = SideToRun("A", a_script, script_args)
    b = SideToRun("B", b_script, script_args)
    return run_gate(a, b, out_dir, budget_s, fail_if_slower, as_json)


def run_gate(a: SideToRun, b: SideToRun, out_dir: Path, budget_s: float, fail_if_slower: Optional[float],
             as_json: bool, console: Optional[Console] = None) -> tuple[LiveComparison, Path, int]:
    console = console or Console(stderr=True)
    with console.status("interleaved comparison: starting") as status, private_compile_cache():
        try:
            comparison = compare_live(a, b, out_dir, budget_s, fail_if_slower,
                                      lambda line: status.update(f"interleaved comparison: {line}"))
        except LiveInterrupted:
            console.print("Interrupted: the interleaved comparison stopped; nothing was decided.", style="yellow")
            return None, out_dir, Status.INTERRUPTED.exit_code
    print_live(console, comparison, RunRecord(out_dir).save_live(comparison))
    if as_json:
        sys.stdout.write(dumps(comparison).decode() + "\n")
    return comparison, out_dir, _exit_code(comparison)


def _exit_code(comparison: LiveComparison) -> int:
    if comparison.gate is not None and comparison.gate.failed:
        return EXIT_SLOWER
    return 1 if comparison.stopped == "failed" else 0


def baseline_ref_gate(script: str, script_args: tuple[str, ...], revision: str, run_dir: Path, budget_s: float,
                      fail_if_slower: Optional[float], console: Console) -> int:
    """`run --baseline-ref REV`, after the run: the script at REV (A) against the script as it is now (B)."""
    with checked_out(script, revision) as (tree, repo):
        a = SideToRun("A", str(tree / Path(script).resolve().relative_to(repo)), script_args,
                      _import_paths(tree), revision)
        b = SideToRun("B", script, script_args, _import_paths(repo))
        console.print()
        console.print(f"Interleaved with {revision}: {Path(script).name} as it is (B) against {revision}'s (A), "
                      f"taking turns, for up to {budget_s:.0f} s.", highlight=False)
        return run_gate(a, b, run_dir, budget_s, fail_if_slower, False, console)[2]


def check_revision(script: str, revision: str) -> None:
    """Before the run: the script is in a git repository that has REV, and REV has the script."""
    repo = _repository(script)
    relative = Path(script).resolve().relative_to(repo)
    _git(repo, "cat-file", "-e", f"{revision}:{relative.as_posix()}",
         failure=f"{relative} does not exist at --baseline-ref {revision} (or {revision} is not a revision)",
         fix="pass a revision that has the script: a commit, a branch, a tag (git log shows them)")


@contextmanager
def checked_out(script: str, revision: str) -> Iterator[tuple[Path, Path]]:
    """The repository's tracked files at REV in a temporary folder (git archive: nothing is written into the
    repository, its worktrees or its index); the folder and the repository's root."""
    repo = _repository(script)
    folder = Path(tempfile.mkdtemp(prefix="diagnose-ref-"))
    try:
        archive = _git(repo, "archive", "--format=tar", revision, text=False,
                       failure=f"git could not export --baseline-ref {revision}", fix="check the revision")
        with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
            if hasattr(tarfile, "data_filter"):  # Python 3.10.12+: no links or paths out of the folder
                tar.extractall(folder / "tree", filter="data")
            else:
                tar.extractall(folder / "tree")
        yield folder / "tree", repo
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _repository(script: str) -> Path:
    top = _git(Path(script).resolve().parent, "rev-parse", "--show-toplevel",
               failure=f"--baseline-ref needs {script} inside a git repository",
               fix="run it from a clone, or compare two files with `diagnose compare --live A.py B.py`")
    return Path(top.strip()).resolve()


def _git(cwd: Path, *args: str, failure: str, fix: str, text: bool = True):
    if shutil.which("git") is None:
        raise UserError("--baseline-ref needs git, and git is not on PATH", "install git, or use compare --live")
    try:
        done = subprocess.run(["git", "-C", str(cwd), *args], capture_output=True, text=text,
                              timeout=GIT_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise UserError(f"{failure}: git did not answer in {GIT_TIMEOUT_S:.0f} s", fix) from None
    if done.returncode != 0:
        said = done.stderr if text else done.stderr.decode(errors="replace")
        raise UserError(f"{failure}: {said.strip().splitlines()[-1] if said.strip() else 'git failed'}", fix)
    return done.stdout


def _import_paths(root: Path) -> tuple[tuple[str, str], ...]:
    """Each side imports its own version's packages first (the repository's root, and src/ in a src layout): a
    package installed from the working copy would otherwise be imported by A too."""
    paths = [str(root / "src")] if (root / "src").is_dir() else []
    paths.append(str(root))
    existing = os.environ.get("PYTHONPATH")
    return (("PYTHONPATH", os.pathsep.join([*paths, *([existing] if existing else [])])),)
