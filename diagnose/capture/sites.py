"""Find the user's own line in a call stack: the first frame outside torch, diagnose and installed packages."""
from __future__ import annotations

import os
import sysconfig
from types import FrameType
from typing import Optional

import torch

from diagnose.resources import PACKAGE_DIR

_LIBRARY_DIRS = tuple(
    os.path.realpath(p) + os.sep
    for p in {
        os.path.dirname(torch.__file__),
        str(PACKAGE_DIR),
        sysconfig.get_paths()["stdlib"],
        sysconfig.get_paths()["purelib"],
        sysconfig.get_paths()["platlib"],
    }
)
_TORCH_DIR = os.path.realpath(os.path.dirname(torch.__file__)) + os.sep
_real_cache: dict[str, str] = {}


def _realpath(filename: str) -> str:
    real = _real_cache.get(filename)
    if real is None:
        real = _real_cache[filename] = os.path.realpath(filename)
    return real


def is_user_file(filename: str) -> bool:
    if filename.startswith("<"):
        return False
    return not _realpath(filename).startswith(_LIBRARY_DIRS)


# torch's own machinery: Python time here is framework overhead (optimizer loops, module calls, autograd,
# the DataLoader, compilation); time in other torch functions the user calls (torch.save...) is the user's work.
_FRAMEWORK = tuple(os.path.join(_TORCH_DIR, p) for p in (
    "optim", "nn", "autograd", "utils/data", "_dynamo", "_inductor", "amp", "cuda/amp", "_tensor.py",
    "functional.py", "overrides.py", "_ops.py", "profiler", "utils/hooks.py", "_compile.py")) + (
    str(PACKAGE_DIR) + os.sep,)


def is_framework_file(filename: str) -> bool:
    return _realpath(filename).startswith(_FRAMEWORK)


def user_location(frame: Optional[FrameType]) -> Optional[str]:
    """'file:line' of the innermost user frame at or above `frame`."""
    while frame is not None:
        if is_user_file(frame.f_code.co_filename):
            return f"{_realpath(frame.f_code.co_filename)}:{frame.f_lineno}"
        frame = frame.f_back
    return None


def class_location(cls: type) -> Optional[str]:
    """'file:line' where a user's class is defined, or None for library classes."""
    import inspect

    try:
        filename = inspect.getsourcefile(cls)
        line = inspect.getsourcelines(cls)[1]
    except (TypeError, OSError):
        return None
    if filename is None or not is_user_file(filename):
        return None
    return f"{_realpath(filename)}:{line}"
