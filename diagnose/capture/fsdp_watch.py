"""FSDP2's fully_shard(), watched from inside the child: each call's settings and the user's line, and the changes
an experiment makes to them (ChangeSet.fsdp_edits). torch.distributed.fsdp costs about half a second to import, so
it is wrapped when the script imports it (an import hook), not before."""
from __future__ import annotations

import functools
import importlib.abc
import importlib.util
import sys
from typing import Callable, Optional

from diagnose.capture.changes import ChangeSet
from diagnose.capture.sites import user_location
from diagnose.model import FsdpInfo

MODULES = ("torch.distributed.fsdp", "torch.distributed.fsdp._fully_shard", "torch.distributed._composable.fsdp")


class FsdpWatch:
    def __init__(self) -> None:
        self.location: Optional[str] = None
        self.reshard: list[str] = []
        self.param_dtype = self.reduce_dtype = None
        self.offload = False

    def called(self, frame, kwargs: dict) -> None:
        if self.location is None:
            self.location = user_location(frame)
        self.reshard.append(str(kwargs.get("reshard_after_forward")))
        policy = kwargs.get("mp_policy")
        if policy is not None:
            self.param_dtype = _dtype(getattr(policy, "param_dtype", None)) or self.param_dtype
            self.reduce_dtype = _dtype(getattr(policy, "reduce_dtype", None)) or self.reduce_dtype
        offload = kwargs.get("offload_policy")
        self.offload = self.offload or (offload is not None and type(offload).__name__ == "CPUOffloadPolicy")

    def record(self) -> Optional[FsdpInfo]:
        if not self.reshard:
            return None
        backend, world = _group()
        return FsdpInfo(location=self.location, units=len(self.reshard), reshard_after_forward=tuple(self.reshard),
                        param_dtype=self.param_dtype, reduce_dtype=self.reduce_dtype, offload=self.offload,
                        backend=backend, world_size=world)


def _dtype(dtype) -> Optional[str]:
    return None if dtype is None else str(dtype).replace("torch.", "")


def _group() -> tuple[Optional[str], Optional[int]]:
    import torch.distributed as dist

    try:
        return str(dist.get_backend()), int(dist.get_world_size())
    except Exception:  # no default process group
        return None, None


def wrapped(original, watch: FsdpWatch, changes: ChangeSet):
    if getattr(original, "diagnose_watched", False):
        return original

    @functools.wraps(original)
    def fully_shard(module, *args, **kwargs):
        for edit in changes.fsdp_edits:
            edit(kwargs)
        watch.called(sys._getframe(1), kwargs)
        return original(module, *args, **kwargs)

    fully_shard.diagnose_watched = True
    return fully_shard


class _AfterImport(importlib.abc.MetaPathFinder):
    """Runs `then(module)` right after one of `names` is executed, before whatever imported it sees it."""

    def __init__(self, names: tuple[str, ...], then: Callable) -> None:
        self.names, self.then, self.finding = names, then, False

    def find_spec(self, fullname, path, target=None):
        if fullname not in self.names or self.finding:
            return None
        self.finding = True
        try:
            spec = importlib.util.find_spec(fullname)
        finally:
            self.finding = False
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        execute, then = spec.loader.exec_module, self.then

        def exec_module(module):
            execute(module)
            then(module)

        spec.loader.exec_module = exec_module
        return spec


def install(watch: FsdpWatch, changes: ChangeSet) -> Callable[[], None]:
    """Wrap fully_shard where the script can import it from; returns the undo."""
    patched: list[tuple] = []

    def patch(module) -> None:
        original = getattr(module, "fully_shard", None)
        if original is not None and not getattr(original, "diagnose_watched", False):
            module.fully_shard = wrapped(original, watch, changes)
            patched.append((module, original))

    for name in MODULES:
        if name in sys.modules:
            patch(sys.modules[name])
    hook = _AfterImport(MODULES, patch)
    sys.meta_path.insert(0, hook)

    def undo() -> None:
        if hook in sys.meta_path:
            sys.meta_path.remove(hook)
        for module, original in reversed(patched):
            module.fully_shard = original

    return undo
