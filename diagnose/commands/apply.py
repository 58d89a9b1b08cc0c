"""`diagnose apply RUN [--change NAME] [--dry-run]`: the change a run verified, written into the user's files.

The patch (RUN/verified.patch, or RUN/changes/NAME.patch) is against the files as they were when the run started:
a file whose sha256 differs from the one kept then is refused (exit code 7), nothing written. Each file edited
keeps a backup beside it (FILE.orig, never over an existing one) unless git has it committed unchanged, and what
was changed is printed. Only a change verified faster is applied unless it is named."""
from __future__ import annotations

import hashlib
import os
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

from diagnose.errors import UserError
from diagnose.model import HandBack, HandBacks, Verdict
from diagnose.record.run_record import RunRecord

HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")


class FileChangedSinceRun(UserError):
    """A file the change edits is not the file the run measured: refused, nothing written."""
    exit_code = 7


@dataclass(frozen=True)
class FilePatch:
    path: str  # relative to the folder the run started in
    hunks: tuple[tuple[int, tuple[str, ...]], ...]  # (old start line, the hunk's lines with their " -+" marks)
    new_starts: tuple[int, ...] = ()  # each hunk's first line in the edited file


def parse_patch(text: str) -> list[FilePatch]:
    """The files and hunks of a unified diff with a/ and b/ prefixes (as diagnose writes them)."""
    files: list[FilePatch] = []
    path, hunks, current, starts = None, [], None, []
    lines = text.splitlines(keepends=True)
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("--- ") and i + 1 < len(lines) and lines[i + 1].startswith("+++ "):
            if path is not None:
                files.append(FilePatch(path, tuple((s, tuple(h)) for s, h in hunks), tuple(starts)))
            path, hunks, current, starts = lines[i + 1][4:].rstrip("\n").removeprefix("b/"), [], None, []
            i += 2
            continue
        match = HUNK.match(line)
        if match:
            current = []
            hunks.append((int(match.group(1)), current))
            starts.append(int(match.group(3)))
        elif current is not None and line[:1] in (" ", "-", "+", "\\"):
            current.append(line)
        i += 1
    if path is not None:
        files.append(FilePatch(path, tuple((s, tuple(h)) for s, h in hunks), tuple(starts)))
    return files


def patched(text: str, patch: FilePatch) -> str:
    """`text` with the patch's hunks applied where they say; ValueError when its lines are not there."""
    old = text.splitlines(keepends=True)
    out: list[str] = []
    at = 0  # lines of `old` consumed
    for start, hunk in patch.hunks:
        begin = max(start - 1, 0) if any(h[:1] in " -" for h in hunk) else start
        out += old[at:begin]
        at = begin
        for k, line in enumerate(hunk):
            if line.startswith("\\"):
                continue
            no_newline = k + 1 < len(hunk) and hunk[k + 1].startswith("\\")
            body = line[1:].rstrip("\n") if no_newline else line[1:]
            if line[0] in " -":
                if at >= len(old) or old[at] != body:
                    raise ValueError(f"line {at + 1} is not what the patch expects")
                at += 1
            if line[0] in " +":
                out.append(body)
    out += old[at:]
    return "".join(out)


def load_hand_backs(run_dir: Path) -> HandBacks:
    record = RunRecord.existing(run_dir)
    if not record.has_own_config():
        raise UserError(f"{run_dir} is not a run folder: it has no config.json written by diagnose",
                        "pass a folder written by `diagnose run` (with experiments)")
    hand_backs = record.hand_backs()
    if hand_backs is None:
        raise UserError(f"{run_dir} has no change to apply: no experiment of that run measured one",
                        "run the experiments: `diagnose run --experiments auto SCRIPT` (the default)")
    return hand_backs


def choose(hand_backs: HandBacks, name: Optional[str]) -> HandBack:
    """The verified change, or the one named; never a change not verified faster unless named."""
    known = {h.name: h for h in hand_backs.changes}
    others = ", ".join(n for n in known if n != "verified") or "none"
    if name is None or name in ("verified", "combined"):
        if "verified" in known:
            return known["verified"]
        if name is not None:
            raise UserError("this run verified no change faster", f"name one with --change: {others}")
        raise UserError("this run verified no change faster, so none is applied by default",
                        f"apply a measured one by naming it with --change (the changes: {others}); see their "
                        "verdicts in the report first")
    if name not in known:
        raise UserError(f"no change named {name} in this run", f"the changes: {', '.join(known)}")
    return known[name]


def _sha256(path: Path) -> Optional[str]:
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        return None


def _git_clean(folder: Path, files: list[Path]) -> bool:
    """Every file is tracked by git and unchanged from its last commit: `git checkout -- FILE` undoes the edit."""
    try:
        tracked = subprocess.run(["git", "ls-files", "--error-unmatch", "--", *map(str, files)], cwd=folder,
                                 capture_output=True, text=True, timeout=30)
        status = subprocess.run(["git", "status", "--porcelain", "--", *map(str, files)], cwd=folder,
                                capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return False
    return tracked.returncode == 0 and status.returncode == 0 and not status.stdout.strip()


def backup_path(path: Path) -> Path:
    """FILE.orig, else FILE.orig.1, .2...: never an existing file."""
    candidate = path.with_name(path.name + ".orig")
    n = 0
    while candidate.exists():
        n += 1
        candidate = path.with_name(f"{path.name}.orig.{n}")
    return candidate


def _write_atomically(path: Path, text: str) -> None:
    mode = path.stat().st_mode
    temporary = path.with_name(f".{path.name}.diagnose-apply.tmp")
    temporary.write_text(text, encoding="utf-8", newline="")
    os.chmod(temporary, mode & 0o7777)
    os.replace(temporary, path)


def apply_command(run_dir: Path, name: Optional[str], dry_run: bool, say: Callable[[str], None],
                  show: Callable[[str], None]) -> int:
    """`say`: messages (stderr); `show`: the diff (stdout)."""
    hand_backs = load_hand_backs(run_dir)
    chosen = choose(hand_backs, name)
    folder = Path(hand_backs.folder)
    measured = f"{chosen.speedup:.2f}x, {chosen.verdict}" if chosen.speedup is not None else chosen.verdict
    if chosen.verdict != Verdict.FASTER and name is not None:
        say(f"note: {chosen.label} was not verified faster ({measured}): applied because it was named")
    not_edits = [f"  - {line}" for line in chosen.not_edits]
    note = run_dir / chosen.note if chosen.note else None
    if not chosen.patch:
        say(f"{chosen.label} ({measured}) is no edit of your files; nothing written. What to do instead:")
        for line in not_edits:
            say(line)
        if note is not None:
            say(f"  (the snippets: {note})")
        return 0
    patch_text = (run_dir / chosen.patch).read_text(encoding="utf-8")
    if not folder.is_dir():
        raise UserError(f"the folder the run started in is gone: {folder}",
                        f"apply {run_dir / chosen.patch} by hand where your files are: `git apply` or `patch -p1`")
    changed = [e for e in chosen.edits if _sha256(folder / e.path) not in (e.before_sha256, e.after_sha256)]
    done = [e for e in chosen.edits if _sha256(folder / e.path) == e.after_sha256]
    if dry_run:
        show(patch_text.rstrip("\n"))
    if changed:
        names = ", ".join(e.path for e in changed)
        raise FileChangedSinceRun(
            f"{names} changed since the run (in {folder}): the change was measured on the file as it was, so it is "
            "not applied" + (" (dry run: nothing would be written)" if dry_run else "; nothing was written"),
            f"run diagnose again on the file as it is now, or merge {run_dir / chosen.patch} by hand "
            "(`git apply --3way` in a git checkout)")
    if len(done) == len(chosen.edits):
        say(f"{chosen.label} is already in your files ({', '.join(e.path for e in done)}): nothing to write")
        return 0
    files = {p.path: p for p in parse_patch(patch_text)}
    todo = [e for e in chosen.edits if e not in done]
    new_texts = {}
    for edit in todo:
        path = folder / edit.path
        try:
            new_texts[edit.path] = patched(path.read_text(encoding="utf-8"), files[edit.path])
        except (KeyError, ValueError) as exc:  # the hash matched: a patch that does not apply is diagnose's bug
            raise UserError(f"{run_dir / chosen.patch} does not apply to {edit.path} ({exc})",
                            "nothing was written; please report this with the run folder") from exc
    if dry_run:
        say(f"dry run: {chosen.label} ({measured}) would edit {', '.join(new_texts)} in {folder}; nothing written")
        for line in not_edits:
            say(line)
        return 0
    paths = [folder / p for p in new_texts]
    in_git = _git_clean(folder, paths)
    for relative, text in new_texts.items():
        path = folder / relative
        backup = None
        if not in_git:
            backup = backup_path(path)
            backup.write_bytes(path.read_bytes())
        _write_atomically(path, text)
        kept = (f"backup {backup.relative_to(folder) if backup.is_relative_to(folder) else backup}" if backup
                else f"committed in git: `git checkout -- {relative}` undoes it")
        say(f"edited {relative}: {_summary(files[relative])} ({kept})")
    say(f"applied {chosen.label} ({measured}), in {folder}")
    if not_edits:
        say("not edits of your files, to do yourself:")
        for line in not_edits:
            say(line)
        if note is not None:
            say(f"  (the snippets: {note})")
    return 0


def _summary(patch: FilePatch) -> str:
    """The lines the edit wrote, as the edited file numbers them: "line 55: `...`"."""
    parts = []
    for (_, hunk), line in zip(patch.hunks, patch.new_starts):
        for text in hunk:
            if text.startswith("+"):
                parts.append(f"line {line}: `{text[1:].strip()}`")
            if text[:1] in " +":
                line += 1
    return "; ".join(parts) or "edited"
