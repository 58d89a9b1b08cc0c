"""Keep the user's files safe while their script runs under diagnose.

Writes the script makes inside the user's folders (the current folder and the script's folder) go to
RUN/sandbox/<same relative path> instead: open() and io.open() in a writing mode, torch.save, safetensors, os.replace,
os.rename; removals there (os.remove, os.unlink, os.rmdir, shutil.rmtree) are skipped, and re-making a folder
whose removal was skipped succeeds. Folders the script made there are removed at the end when empty.
Reads of a file the script wrote earlier in the same run come back
from the sandbox, so a script that saves a checkpoint and loads it again still works. The run folder itself
and everything outside the user's folders (e.g. /tmp, caches) are left alone. Low-level os.open and writes
from C extensions that open files themselves (other than safetensors) are not redirected.
"""
from __future__ import annotations

import builtins
import importlib.util
import io
import os
import shutil
from pathlib import Path
from typing import Any, Callable

import torch

WRITE_MODES = set("wax+")


class WriteSandbox:
    def __init__(self, protected: list[Path], sandbox_dir: Path, exempt: list[Path]):
        self.protected = [p.resolve() for p in protected]
        self.exempt = [p.resolve() for p in exempt]
        self.sandbox_dir = sandbox_dir.resolve()
        self.redirected: dict[Path, Path] = {}
        self.skipped_removals: list[str] = []
        self.kept_dirs: set[Path] = set()  # protected folders the script removed (we kept): mkdir may re-make them
        self.made_dirs: set[Path] = set()  # folders the script made in the user's folders: its own to remove
        self._undo: list[Callable[[], None]] = []

    # -- path mapping -------------------------------------------------------------------------------
    def _relative(self, path: Any) -> Path | None:
        """Path relative to the protected folder it lies in, or None when it is not protected."""
        if not isinstance(path, (str, bytes, os.PathLike)) or isinstance(path, int):
            return None
        target = Path(os.fsdecode(path)).absolute()
        target = target.parent.resolve() / target.name
        if any(target == e or e in target.parents for e in self.exempt + [self.sandbox_dir]):
            return None
        for root in self.protected:
            if target == root or root in target.parents:
                return Path(root.name) / target.relative_to(root)
        return None

    def for_write(self, path: Any, keep_content: bool = False) -> Any:
        relative = self._relative(path)
        if relative is None:
            return path
        original = Path(os.fsdecode(path)).absolute()
        redirected = self.sandbox_dir / relative
        if original not in self.redirected:
            redirected.parent.mkdir(parents=True, exist_ok=True)
            if keep_content and original.is_file():
                shutil.copy2(original, redirected)  # appending to the user's file: append to a copy
            self.redirected[original] = redirected
        return str(redirected)

    def for_read(self, path: Any) -> Any:
        if not isinstance(path, (str, bytes, os.PathLike)) or isinstance(path, int):
            return path
        return str(self.redirected.get(Path(os.fsdecode(path)).absolute(), path))

    # -- patches --------------------------------------------------------------------------------------
    def install(self) -> None:
        original_open = io.open
        sandbox = self

        def guarded_open(file, mode="r", *args, **kwargs):
            if isinstance(mode, str) and WRITE_MODES & set(mode):
                file = sandbox.for_write(file, keep_content="a" in mode or "+" in mode)
            else:
                file = sandbox.for_read(file)
            return original_open(file, mode, *args, **kwargs)

        self._patch(builtins, "open", guarded_open)
        self._patch(io, "open", guarded_open)
        self._wrap(torch, "save", lambda save, obj, f, *a, **k: save(obj, self.for_write(f), *a, **k))
        self._wrap(torch, "load", lambda load, f, *a, **k: load(self.for_read(f), *a, **k))
        for name in ("replace", "rename"):
            self._wrap(os, name, self._guarded_move)
        for name in ("remove", "unlink", "rmdir"):
            self._wrap(os, name, self._guarded_remove)
        self._wrap(os, "mkdir", self._guarded_mkdir)
        self._wrap(shutil, "rmtree", self._guarded_rmtree)
        for name in ("chmod", "utime"):  # after a redirected move (fsspec's atomic save, Lightning's checkpoints)
            self._wrap(os, name, lambda call, path, *a, **k: call(self.for_read(path), *a, **k))
        self._guard_safetensors()

    def _guard_safetensors(self) -> None:
        """safetensors writes from Rust, past open(): the Hugging Face Trainer saves checkpoints with it."""
        if importlib.util.find_spec("safetensors") is None:
            return
        import safetensors.torch as st

        self._wrap(st, "save_file",
                   lambda save, tensors, filename, *a, **k: save(tensors, self.for_write(filename), *a, **k))
        self._wrap(st, "load_file", lambda load, filename, *a, **k: load(self.for_read(filename), *a, **k))

    def _guarded_move(self, original, src, dst, *args, **kwargs):
        if kwargs.get("src_dir_fd") is not None or kwargs.get("dst_dir_fd") is not None:
            return original(src, dst, *args, **kwargs)  # paths relative to a directory fd: not the cwd's
        source = self.for_read(src)
        if self._relative(source) is not None and not self._made_here(source) and os.path.isfile(source):
            # the user's own file renamed: the script gets its copy under the new name, the user keeps theirs
            return shutil.copy2(source, self.for_write(dst))
        return original(source, self.for_write(dst), *args, **kwargs)

    def _guarded_remove(self, original, path, *args, **kwargs):
        target = self._at_dir_fd(path, kwargs.get("dir_fd"))
        if self._relative(target) is not None:
            redirected = self.redirected.pop(Path(os.fsdecode(target)).absolute(), None)
            if redirected is not None:  # the script's own file, kept in the sandbox
                return original(redirected, *args, **{k: v for k, v in kwargs.items() if k != "dir_fd"})
            if not self._made_here(target):
                self._skip(target)
                return None
        return original(path, *args, **kwargs)

    def _guarded_rmtree(self, original, path, *args, **kwargs):
        """The usual 'fresh output folder' idiom, rmtree then makedirs: the user's folder stays, the script's own
        files in it (redirected here) go."""
        if self._relative(path) is None or not os.path.lexists(path):
            return original(path, *args, **kwargs)  # a missing folder errors (or not) as rmtree decides
        target = Path(os.fsdecode(path)).absolute()
        for written in [k for k in self.redirected if k == target or target in k.parents]:
            Path(self.redirected.pop(written)).unlink(missing_ok=True)
        if self._made_here(target):  # e.g. tempfile.mkdtemp(dir=".") then rmtree: the script's own folder
            return original(path, *args, **kwargs)
        self._skip(path)
        return None

    def _guarded_mkdir(self, original, path, *args, **kwargs):
        if kwargs.get("dir_fd") is None and self._relative(path) is not None:
            target = Path(os.fsdecode(path)).absolute()
            if target in self.kept_dirs and target.is_dir():
                self.kept_dirs.discard(target)
                return None  # its removal was skipped: as far as the script knows, it is made afresh
            result = original(path, *args, **kwargs)
            self.made_dirs.add(self._canonical(path))
            return result
        return original(path, *args, **kwargs)

    @staticmethod
    def _canonical(path: Any) -> Path:
        """'..' collapsed and the folder's symlinks resolved, as _relative sees paths: out/../x is not in out/."""
        target = Path(os.path.abspath(os.fsdecode(path)))
        return target.parent.resolve() / target.name

    def _made_here(self, path: Any) -> bool:
        target = self._canonical(path)
        return any(target == d or d in target.parents for d in self.made_dirs)

    def _skip(self, path: Any) -> None:
        target = Path(os.fsdecode(path)).absolute()
        if str(target) not in self.skipped_removals:
            self.skipped_removals.append(str(target))
        if target.is_dir():
            self.kept_dirs.add(target)

    @staticmethod
    def _at_dir_fd(path: Any, dir_fd: Any) -> Any:
        """A name relative to a directory descriptor, as a path (Linux: /proc/self/fd), to check like any other."""
        if dir_fd is None or not isinstance(path, (str, bytes, os.PathLike)):
            return path
        try:
            return os.path.join(os.readlink(f"/proc/self/fd/{dir_fd}"), os.fsdecode(path))
        except OSError:
            return path

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
        self._remove_empty_made_dirs()

    def _remove_empty_made_dirs(self) -> None:
        """Folders the script made in the user's folders (an output_dir, lightning_logs/) hold nothing once their
        files went to the sandbox: remove them, deepest first, so the user's folder is left as it was."""
        for folder in sorted(self.made_dirs, key=lambda d: len(d.parts), reverse=True):
            try:
                folder.rmdir()  # only when empty: a file written by a C extension keeps its folder
            except OSError:
                pass

    def written(self) -> dict[str, str]:
        return {str(k): str(v) for k, v in self.redirected.items()}
