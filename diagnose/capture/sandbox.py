"""Keep the user's files safe while their script runs under diagnose, without moving anything the run needs.

The script's writes land where it, and any process it starts (a compiler reading the source inductor wrote, a
subprocess, a C extension), expects them. What is protected is what was there before: the user's folders (the
current folder and the script's) are listed before the run (Snapshot), and a file listed there is kept aside, in
RUN/sandbox/.originals, before the script's first change to it (open() and io.open() in a writing mode,
torch.save, safetensors, os.replace, os.rename, chmod, utime) or removal (os.remove, os.unlink, os.rmdir, and so
shutil.rmtree and pathlib), journaled first so that no copy goes unrecorded. After the run, `restore` (run by the
parent process, so a run killed mid-way is restored too) moves what the script's Python code made (files, and
whatever any process put in folders it made) and its versions of the user's files to RUN/sandbox/<root>/<same
relative path>, where the report lists them, puts the originals back byte-identical, re-makes removed folders and
removes the folders the run made. A change another process made to a file that was there before has no copy to
restore from: it is left as it is and named (`unrestored`); so are new files the script's Python did not make
(an editor's, a subprocess's outside the run's folders). The run folder, diagnose_runs/, virtual environments,
.git, caches and everything outside the user's folders are left alone.
"""
from __future__ import annotations

import builtins
import fcntl
import importlib.util
import io
import json
import os
import shutil
import stat
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional

WRITE_MODES = set("wax+")
STATE_ENV = "DIAGNOSE_SANDBOX_STATE"  # set by the parent: it listed the folders and restores after the run
MAX_ENTRIES = 100_000  # a snapshot lists at most this many paths...
MAX_LIST_S = 5.0  # ...for at most this long (a dataset under the current folder): beyond, it is partial
# not the user's work, and large: bytecode the import system rewrites, version control, tools' and libraries' caches
SKIPPED_FOLDERS = frozenset({"__pycache__", ".git", "node_modules", ".cache", ".pytest_cache", ".ruff_cache",
                             "diagnose_runs"})
# the sandbox's own file operations, as they were before it patched any
_unlink, _rename, _link = os.unlink, os.rename, os.link
COPY, LINK, MOVE = "copy", "link", "move"  # how an original is kept: see WriteSandbox.keep_original


def _canonical(path: Any) -> Path:
    """'..' collapsed and the folder's symlinks resolved (not the last part's): out/../x is not in out/."""
    target = Path(os.path.abspath(os.fsdecode(path)))
    return target.parent.resolve() / target.name


@dataclass
class Snapshot:
    """The user's folders before the run: each file's size and modification time, the folders, and the folders
    left out (virtual environments, SKIPPED_FOLDERS), which are not protected either."""
    roots: list[str]
    names: list[str]  # each root's folder in RUN/sandbox: its name, made unique
    exempt: list[str]
    files: dict[str, list[int]] = field(default_factory=dict)  # path -> [size, mtime_ns]
    dirs: set[str] = field(default_factory=set)
    complete: bool = True

    @classmethod
    def take(cls, roots: list[Path], exempt: list[Path], listed: bool = True) -> "Snapshot":
        """`listed` False: no listing (a rank of a job the user launched: its peers write meanwhile), so only
        the paths the journal names are restored."""
        outer = _outermost(roots)
        snap = cls([str(r) for r in outer], _unique_names(outer), [str(e) for e in exempt], complete=listed)
        deadline = time.monotonic() + MAX_LIST_S
        for path, entry in (_walk(snap.roots, snap.exempt) if listed else ()):
            if len(snap.files) + len(snap.dirs) >= MAX_ENTRIES or time.monotonic() > deadline:
                snap.complete = False
                break
            if entry is None:
                snap.dirs.add(path)
            else:
                snap.files[path] = [entry.st_size, entry.st_mtime_ns]
        return snap

    def had(self, path: Path) -> Optional[bool]:
        """Whether the path was there before the run; None when the listing was partial and does not say."""
        key = str(path)
        if key in self.files or key in self.dirs:
            return True
        return False if self.complete else None

    def relative(self, target: Path) -> Optional[Path]:
        """The path in RUN/sandbox of a protected path (None: not protected)."""
        for root, name in zip(self.roots, self.names):
            root_path = Path(root)
            if target == root_path or root_path in target.parents:
                inside = target.relative_to(root_path)
                if any(part in SKIPPED_FOLDERS for part in inside.parts) or any(
                        target == Path(e) or Path(e) in target.parents for e in self.exempt):
                    return None
                return Path(name) / inside
        return None

    def save(self, file: Path) -> None:
        data = {"roots": self.roots, "names": self.names, "exempt": self.exempt, "files": self.files,
                "dirs": sorted(self.dirs), "complete": self.complete}
        file.write_text(json.dumps(data))

    @classmethod
    def load(cls, file: Path) -> "Snapshot":
        data = json.loads(file.read_text())
        return cls(data["roots"], data["names"], data["exempt"], data["files"], set(data["dirs"]),
                   data["complete"])


def _outermost(roots: list[Path]) -> list[Path]:
    """The roots without those inside another, and never `/` (a container's default folder: the whole system)."""
    resolved = sorted({r.resolve() for r in roots if r.resolve() != Path("/")}, key=lambda p: len(p.parts))
    return [r for i, r in enumerate(resolved) if not any(o in r.parents for o in resolved[:i])]


def _unique_names(roots: list[Path]) -> list[str]:
    names: list[str] = []
    for root in roots:
        name = root.name or "root"
        names.append(name if name not in names else f"{name}-{len(names) + 1}")
    return names


def _walk(roots: list[str], exempt: list[str]):
    """(path, stat) of each file and (path, None) of each folder under the roots, not following symlinks;
    exempt paths, SKIPPED_FOLDERS, virtual environments (a .venv beside the script: tens of thousands of files the
    script does not write) and other diagnose runs' folders (`--out` in the project: another run writes there
    meanwhile) are left out, their paths added to `exempt`."""
    skip = set(exempt)
    stack = [r for r in roots if os.path.isdir(r)]
    while stack:
        folder = stack.pop()
        try:
            entries = list(os.scandir(folder))
        except OSError:
            continue
        for entry in entries:
            path = os.path.join(folder, entry.name)
            try:
                if entry.is_dir(follow_symlinks=False):
                    if path in skip or entry.name in SKIPPED_FOLDERS:
                        continue
                    if os.path.exists(os.path.join(path, "pyvenv.cfg")) or _is_run_folder(path):
                        exempt.append(path)
                        continue
                    yield path, None
                    stack.append(path)
                elif path not in skip:
                    yield path, entry.stat(follow_symlinks=False)
            except OSError:
                continue


def _is_run_folder(path: str) -> bool:
    """A folder diagnose wrote a run in: its config.json is a RunConfig, beside the run's sandbox or script.log."""
    from diagnose.record.run_record import RunRecord

    return RunRecord(path).is_run()


def own_output_files() -> list[Path]:
    """The files diagnose's stdout and stderr write to (`diagnose run train.py > run.log` in the project), this
    process's and every other diagnose run's on the machine (two runs in one folder, each to its own log):
    diagnose's output, which grows during the run, not a change of the user's."""
    found = {path for fd in (1, 2) for path in [_output_file("self", fd)] if path}
    for pid in _diagnose_processes():
        found |= {path for fd in (1, 2) for path in [_output_file(pid, fd)] if path}
    return sorted(found)


def _output_file(pid: str, fd: int) -> Optional[Path]:
    """The regular file a process's descriptor writes to; None for a terminal, a pipe, or one not readable."""
    try:
        target = os.readlink(f"/proc/{pid}/fd/{fd}")
        return Path(target) if target.startswith("/") and stat.S_ISREG(os.stat(target).st_mode) else None
    except OSError:  # closed, gone, another user's, or no /proc: nothing to leave out
        return None


def _diagnose_processes() -> list[str]:
    """Other live `diagnose` commands (`diagnose ...` or `python -m diagnose ...`), by their /proc entries."""
    found = []
    try:
        pids = [p for p in os.listdir("/proc") if p.isdigit() and int(p) != os.getpid()]
    except OSError:
        return []
    for pid in pids:
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as file:
                argv = file.read().split(b"\0")
        except OSError:
            continue
        named = any(os.path.basename(a) == b"diagnose" for a in argv[:2])
        if named or any(a == b"-m" and b == b"diagnose" for a, b in zip(argv, argv[1:])):
            found.append(pid)
    return found


def exempt_folders(run_dir: Path) -> list[Path]:
    """diagnose's own folders: the whole run folder a timed run's or a rank's folder lies in."""
    from diagnose.record.run_record import RunRecord

    return [RunRecord(run_dir).outermost().path]


class SandboxFiles:
    """Where the sandbox keeps its state in RUN/sandbox."""

    def __init__(self, sandbox_dir: Path):
        self.dir = Path(sandbox_dir).resolve()
        self.state = self.dir / ".state"
        self.snapshot = self.state / "before.json"
        self.journal = self.state / "journal.jsonl"
        self.owner = self.state / "owner.json"  # locked while the run's diagnose or its child lives
        self.owner_fd: Optional[int] = None  # this process's descriptor holding that lock
        self.originals = self.dir / ".originals"


def prepare(sandbox_dir: Path, roots: list[Path], exempt: list[Path], listed: bool = True) -> SandboxFiles:
    """List the user's folders before the run; the child then keeps originals by this listing. The owner file is
    locked (flock) by this process, and by the child that inherits it (`owner_fd`), for as long as either lives:
    an unlocked owner file is a run whose diagnose died before it restored (see claim_abandoned)."""
    files = SandboxFiles(sandbox_dir)
    files.state.mkdir(parents=True, exist_ok=True)
    files.owner_fd = os.open(files.owner, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    fcntl.flock(files.owner_fd, fcntl.LOCK_EX)
    os.write(files.owner_fd, json.dumps({"pid": os.getpid()}).encode())
    Snapshot.take(roots, [*exempt, files.dir, *own_output_files()], listed).save(files.snapshot)
    return files


def release(files: SandboxFiles) -> None:
    """After the owner's own restore: no later run may restore this sandbox again (its state may stay, naming a
    copy that could not be put back)."""
    if files.owner_fd is not None:
        files.owner.unlink(missing_ok=True)  # before the lock goes: nobody sees an unlocked owner file
        os.close(files.owner_fd)
        files.owner_fd = None


def claim_abandoned(runs_root: Path, project: Path) -> list[SandboxFiles]:
    """Sandboxes under `runs_root` (diagnose_runs/) of runs made from `project` that ended without putting the
    user's files back: their diagnose was killed outright (SIGKILL, the OOM killer) and its child is gone too
    (the owner file is no longer locked). Each is returned claimed (locked by this process: another run starting
    now skips it); `release` it after restoring. A sandbox another folder's run made is not touched."""
    states = [*runs_root.glob("*/sandbox/.state/owner.json"),
              *runs_root.glob("*/experiments/*/sandbox/.state/owner.json")]
    claimed = []
    for owner in sorted(states):
        files = SandboxFiles(owner.parent.parent)
        try:
            fd = os.open(owner, os.O_RDONLY)
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            ours = str(project.resolve()) in Snapshot.load(files.snapshot).roots
        except (OSError, ValueError, KeyError):  # locked: its run goes on; or no snapshot to restore from
            ours = False
        if ours and owner.exists():  # still there: not restored by another run meanwhile
            files.owner_fd = fd
            claimed.append(files)
        else:
            os.close(fd)
    return claimed


class WriteSandbox:
    """The child's side: keeps each of the user's files aside before the script first changes or removes it, and
    journals it for `restore`."""

    def __init__(self, protected: list[Path], sandbox_dir: Path, exempt: list[Path], listed: bool = True):
        state = os.environ.get(STATE_ENV)
        self.managed = bool(state) and Path(state).exists()  # the parent restores; else this process does
        self.files = SandboxFiles(Path(state).parent if self.managed else sandbox_dir)
        self.protected, self.exempt, self.listed = protected, exempt, listed
        self.kept: set[Path] = set()  # originals kept aside by this process
        self.made: set[Path] = set()  # paths this process made that were not there before
        self.result: Optional[RestoreResult] = None
        self._undo: list[Callable[[], None]] = []

    # -- keeping originals ----------------------------------------------------------------------------------
    def _had(self, target: Path) -> bool:
        had = self.snapshot.had(target)
        if had is None:  # a partial listing: what is there now and was not made in this run
            return os.path.lexists(target) and target not in self.made
        return had

    def keep_original(self, path: Any, how: str = COPY, folder: bool = False) -> None:
        """Keep the user's file at `path` aside before the script's first change to it: COPY it (changed in
        place), LINK it (removed or replaced: a second name for the same bytes) or MOVE it (about to be
        truncated and rewritten); `folder`: a folder is copied whole (about to be renamed). A failure is
        journaled and reported after the run, never raised into the script."""
        if not isinstance(path, (str, bytes, os.PathLike)):
            return
        target = _canonical(path)
        relative = self.snapshot.relative(target)
        if relative is None or target in self.kept:
            return
        if not os.path.lexists(target):
            if self.snapshot.had(target) is not True:
                self._made(target)
            return
        if not self._had(target) or not _keepable(target, folder):
            return
        self.kept.add(target)
        copy = self.files.originals / relative
        self._journal({"op": "original", "path": str(target), "copy": str(copy)})  # first: no unrecorded copy
        try:
            copy.parent.mkdir(parents=True, exist_ok=True)
            if os.path.isdir(target) and not os.path.islink(target):
                shutil.copytree(target, copy, symlinks=True, dirs_exist_ok=True)
            else:
                _keep_file(target, copy, how)
        except OSError as exc:
            self._journal({"op": "unprotected", "path": str(target), "error": str(exc)})

    def _made(self, target: Path) -> None:
        if target not in self.made:
            self.made.add(target)
            self._journal({"op": "made", "path": str(target)})

    def _journal(self, entry: dict) -> None:
        try:
            fd = os.open(self.files.journal, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            try:
                os.write(fd, (json.dumps(entry) + "\n").encode())
            finally:
                os.close(fd)
        except OSError:  # never the script's failure; a copy without its line is still put back (_clean_up names it)
            pass

    # -- patches ----------------------------------------------------------------------------------------------
    def install(self) -> None:
        if not self.managed:
            self.files = prepare(self.files.dir, self.protected, self.exempt, self.listed)
        self.snapshot = Snapshot.load(self.files.snapshot)
        original_open = io.open
        sandbox = self

        def guarded_open(file, mode="r", *args, **kwargs):
            if isinstance(mode, str) and WRITE_MODES & set(mode):
                sandbox.keep_original(file, MOVE if "w" in mode and "+" not in mode else COPY)
            return original_open(file, mode, *args, **kwargs)

        self._patch(builtins, "open", guarded_open)
        self._patch(io, "open", guarded_open)
        import torch

        self._wrap(torch, "save", lambda save, obj, f, *a, **k: (self.keep_original(f, MOVE),
                                                                  save(obj, f, *a, **k))[1])
        for name in ("replace", "rename"):
            self._wrap(os, name, self._guarded_move)
        for name in ("remove", "unlink"):
            self._wrap(os, name, self._guarded_remove)
        self._wrap(os, "rmdir", self._guarded_rmdir)
        self._wrap(os, "mkdir", self._guarded_mkdir)
        for name in ("chmod", "utime"):
            self._wrap(os, name, lambda call, path, *a, **k: (
                self.keep_original(_at_dir_fd(path, k.get("dir_fd"))), call(path, *a, **k))[1])
        self._guard_safetensors()

    def _guard_safetensors(self) -> None:
        """safetensors writes from Rust, past open(): the Hugging Face Trainer saves checkpoints with it."""
        if importlib.util.find_spec("safetensors") is None:
            return
        import safetensors.torch as st

        self._wrap(st, "save_file", lambda save, tensors, filename, *a, **k: (
            self.keep_original(filename, MOVE), save(tensors, filename, *a, **k))[1])

    def _guarded_move(self, original, src, dst, *args, **kwargs):
        self.keep_original(_at_dir_fd(dst, kwargs.get("dst_dir_fd")), LINK)
        # a copy of the bytes: the moved file may be changed in place under its new name
        self.keep_original(_at_dir_fd(src, kwargs.get("src_dir_fd")), COPY, folder=True)
        return original(src, dst, *args, **kwargs)

    def _guarded_remove(self, original, path, *args, **kwargs):
        self.keep_original(_at_dir_fd(path, kwargs.get("dir_fd")), LINK)
        return original(path, *args, **kwargs)

    def _guarded_rmdir(self, original, path, *args, **kwargs):
        target = _at_dir_fd(path, kwargs.get("dir_fd"))
        folder = _canonical(target) if isinstance(target, (str, bytes, os.PathLike)) else None
        was_users = (folder is not None and self.snapshot.relative(folder) is not None and os.path.isdir(folder)
                     and self._had(folder))
        result = original(path, *args, **kwargs)
        if was_users:
            self._journal({"op": "folder", "path": str(folder)})  # re-made after the run
        return result

    def _guarded_mkdir(self, original, path, *args, **kwargs):
        result = original(path, *args, **kwargs)
        target = _at_dir_fd(path, kwargs.get("dir_fd"))
        if isinstance(target, (str, bytes, os.PathLike)):
            folder = _canonical(target)
            if self.snapshot.relative(folder) is not None and self.snapshot.had(folder) is not True:
                self._made(folder)
        return result

    def _wrap(self, owner, name: str, call: Callable) -> None:
        original = getattr(owner, name)
        self._patch(owner, name, lambda *a, **k: call(original, *a, **k))

    def _patch(self, owner, name: str, value) -> None:
        original = getattr(owner, name)
        setattr(owner, name, value)
        self._undo.append(lambda: setattr(owner, name, original))

    def uninstall(self) -> None:
        for undo in reversed(self._undo):
            undo()
        self._undo.clear()
        if not self.managed:  # run in this process alone: nobody else will restore
            try:
                self.result = restore(self.files.dir)
            except Exception as exc:  # the results still get written; the originals stay where they are named
                self.result = RestoreResult({}, (), (f"could not restore your files: {exc}; the originals are in "
                                                     f"{self.files.originals}",))

    def written(self) -> dict[str, str]:
        return dict(self.result.kept) if self.result else {}

    @property
    def restored(self) -> list[str]:
        return list(self.result.restored) if self.result else []

    @property
    def unrestored(self) -> list[str]:
        return list(self.result.unrestored) if self.result else []


def _keepable(target: Path, folder: bool) -> bool:
    """Regular files and symlinks (a device, a FIFO or a socket is never copied or moved); a folder only when it is
    about to be renamed whole (rmdir removes an empty one: its files were kept one by one; chmod is metadata)."""
    mode = os.lstat(target).st_mode
    if stat.S_ISDIR(mode):
        return folder
    return stat.S_ISREG(mode) or stat.S_ISLNK(mode)


def _keep_file(target: Path, copy: Path, how: str) -> None:
    """Keep the file's bytes at `copy` unless a copy is there already (another process of the run kept it first:
    its copy is the older). LINK and MOVE make no copy of the bytes, on one filesystem."""
    if os.path.lexists(copy):
        return
    if how == MOVE:  # a rename takes the file away atomically: nobody truncates it between link and unlink
        aside = copy.with_name(f".{copy.name}.{os.getpid()}.moving")
        try:
            _rename(target, aside)
        except OSError:  # another filesystem: a copy, and the truncating write then goes to the file itself
            how = COPY
        else:
            _link_no_clobber(aside, copy)
            _unlink(aside)
            return
    if how == LINK:
        try:
            _link_no_clobber(target, copy)
            return
        except OSError:
            pass  # another filesystem
    partial = copy.with_name(f".{copy.name}.{os.getpid()}.partial")
    shutil.copy2(target, partial, follow_symlinks=False)
    _link_no_clobber(partial, copy)
    _unlink(partial)


def _link_no_clobber(source: Path, copy: Path) -> None:
    try:
        _link(source, copy, follow_symlinks=False)
    except FileExistsError:
        pass  # kept first by another process


def _at_dir_fd(path: Any, dir_fd: Any) -> Any:
    """A name relative to a directory descriptor, as a path (Linux: /proc/self/fd), to check like any other."""
    if dir_fd is None or not isinstance(path, (str, bytes, os.PathLike)):
        return path
    try:
        return os.path.join(os.readlink(f"/proc/self/fd/{dir_fd}"), os.fsdecode(path))
    except OSError:
        return path


# -- after the run -------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class RestoreResult:
    kept: dict[str, str]  # user path -> what the script left there, now in RUN/sandbox
    restored: tuple[str, ...]  # the user's files and folders put back after the script changed or removed them
    unrestored: tuple[str, ...]  # changed or removed by another process, with no copy from before: left as they are


@dataclass
class _Journal:
    originals: dict[str, str] = field(default_factory=dict)
    folders: set[str] = field(default_factory=set)
    made: set[str] = field(default_factory=set)
    unprotected: dict[str, str] = field(default_factory=dict)

    @classmethod
    def read(cls, file: Path) -> "_Journal":
        journal = cls()
        lines = file.read_text(errors="replace").splitlines() if file.exists() else []
        for line in lines:
            try:
                entry = json.loads(line)
            except ValueError:  # a line cut short by a kill
                continue
            if entry["op"] == "original":
                journal.originals.setdefault(entry["path"], entry["copy"])
            elif entry["op"] == "folder":
                journal.folders.add(entry["path"])
            elif entry["op"] == "made":
                journal.made.add(entry["path"])
            elif entry["op"] == "unprotected":
                journal.unprotected[entry["path"]] = entry["error"]
        return journal

    def made_it(self, path: str) -> bool:
        """Made by the script's Python, or inside a folder it made (what a compiler wrote into inductor's cache)."""
        return path in self.made or any(parent in self.made for parent in map(str, Path(path).parents))


def restore(sandbox_dir: Path) -> Optional[RestoreResult]:
    """Put the user's folders back as the snapshot found them (see the module's docstring); None when there is no
    snapshot. Each path on its own: one that fails is named, the others still go back."""
    files = SandboxFiles(sandbox_dir)
    if not files.snapshot.exists():
        return None
    snap = Snapshot.load(files.snapshot)
    journal = _Journal.read(files.journal)
    kept: dict[str, str] = {}
    restored: list[str] = []
    problems = [f"{path} (no copy could be kept before the script changed it: {error})"
                for path, error in journal.unprotected.items()]

    def keep_aside(path: str) -> None:
        relative = snap.relative(Path(path))
        if relative is None:
            return
        destination = files.dir / relative
        try:
            destination.parent.mkdir(parents=True, exist_ok=True)
            shutil.move(path, destination)
            kept[path] = str(destination)
        except OSError as exc:
            problems.append(f"{path} (the script's file could not be moved aside: {exc})")

    now_files, now_dirs = _listing(snap, journal)
    for path, stat_now in now_files.items():
        before = snap.files.get(path)
        if path in journal.originals:
            if os.path.lexists(journal.originals[path]):  # the script's version goes aside, the original comes back
                keep_aside(path)
        elif before is None:
            if journal.made_it(path):
                keep_aside(path)
        elif stat_now != before and path not in journal.unprotected:
            problems.append(path)
    for path, copy in journal.originals.items():
        if os.path.lexists(copy):
            try:
                _put_back(copy, path)
                restored.append(path)
            except OSError as exc:
                problems.append(f"{path} (could not put it back: {exc}; your original is {copy})")
    for folder in sorted(journal.folders | (snap.dirs if snap.complete else set()), key=len):
        if not os.path.lexists(folder):
            try:
                os.makedirs(folder, exist_ok=True)
                restored.append(folder)
            except OSError as exc:
                problems.append(f"{folder} (a folder that could not be re-made: {exc})")
    if snap.complete:  # files of the snapshot gone without a copy: removed by another process
        problems += [p for p in snap.files if p not in journal.originals and not os.path.lexists(p)]
    outputs = {str(p) for p in own_output_files()}  # a diagnose run that started writing its log meanwhile
    problems = [p for p in problems if p not in outputs]
    _remove_made_folders(now_dirs, snap, journal)
    _clean_up(files)
    return RestoreResult(kept, tuple(sorted(set(restored))), tuple(problems))


def _put_back(copy: str, path: str) -> None:
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path)  # what the script made in the folder's place (its own files went aside)
    shutil.move(copy, path)


def _clean_up(files: SandboxFiles) -> None:
    """The state goes once every copy is back; a copy still there (it could not be put back) stays, named."""
    leftover = [p for p in files.originals.rglob("*") if not p.is_dir()] if files.originals.exists() else []
    if not leftover:
        shutil.rmtree(files.originals, ignore_errors=True)
        shutil.rmtree(files.state, ignore_errors=True)


def _listing(snap: Snapshot, journal: _Journal) -> tuple[dict[str, list[int]], set[str]]:
    """The user's folders now: listed as before when the snapshot was complete, else the paths the journal names
    (and what lies in folders the script made)."""
    files: dict[str, list[int]] = {}
    dirs: set[str] = set()
    if snap.complete:
        walk = _walk(snap.roots, list(snap.exempt))
    else:
        made_dirs = [p for p in journal.made if os.path.isdir(p) and not os.path.islink(p)]
        walk = _walk(made_dirs, list(snap.exempt))
        for path in journal.made | set(journal.originals):
            if os.path.isdir(path) and not os.path.islink(path):
                dirs.add(path)
            elif os.path.lexists(path):
                status = os.lstat(path)
                files[path] = [status.st_size, status.st_mtime_ns]
    for path, status in walk:
        if status is None:
            dirs.add(path)
        else:
            files[path] = [status.st_size, status.st_mtime_ns]
    return files, dirs


def _remove_made_folders(now_dirs: set[str], snap: Snapshot, journal: _Journal) -> None:
    """Folders the run made (an output_dir, lightning_logs/) are empty once their files went aside: remove them,
    deepest first, so the user's folder is left as it was."""
    new = [d for d in now_dirs | journal.made if d not in snap.dirs and journal.made_it(d)]
    for folder in sorted(new, key=len, reverse=True):
        try:
            os.rmdir(folder)
        except OSError:
            pass
