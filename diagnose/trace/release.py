"""Giving freed memory back to the system. glibc's malloc keeps the memory of freed small arrays (a big trace's
pieces are many of them) for reuse, and a later big array is mapped afresh instead: without a trim the process
holds both, and its peak is the pieces' total plus the arrays they were joined into."""
from __future__ import annotations

import ctypes
from functools import cache
from typing import TypeVar

T = TypeVar("T")


@cache
def _trim():
    try:  # the symbols this process has loaded (find_library("c") would run ldconfig: a process per analysis)
        return ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):  # not glibc (musl, macOS): nothing to trim, their malloc differs
        return None


def released(value: T) -> T:
    """`value`, once the memory freed in making it is given back (an analysis stage's temporaries)."""
    give_back_freed_memory()
    return value


def give_back_freed_memory() -> None:
    trim = _trim()
    if trim is not None:
        trim(0)
