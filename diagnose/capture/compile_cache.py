"""A compile cache of the run's own, so that its compile times mean something: the capture compiles with an empty
cache (cold, as a fresh machine or CI job does) and the timed runs after it with the cache it filled (warm, as a
second run of the script on the same machine does). The user's own cache is neither read nor filled. A user who
set TORCHINDUCTOR_CACHE_DIR keeps it: then the capture's compile is cold or warm as that cache was."""
from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from typing import Iterator

CACHE_VARIABLE = "TORCHINDUCTOR_CACHE_DIR"
MARKER = "DIAGNOSE_PRIVATE_COMPILE_CACHE"  # set in the children: the cache is the run's own


@contextlib.contextmanager
def private_compile_cache() -> Iterator[None]:
    """For the children started inside: the run's own inductor cache, removed afterwards."""
    if os.environ.get(CACHE_VARIABLE):
        yield
        return
    folder = tempfile.mkdtemp(prefix="diagnose-compile-cache-")
    os.environ[CACHE_VARIABLE], os.environ[MARKER] = folder, "1"
    try:
        yield
    finally:
        os.environ.pop(CACHE_VARIABLE, None)
        os.environ.pop(MARKER, None)
        shutil.rmtree(folder, ignore_errors=True)


def cache_kind() -> str:
    """In a child: "private" (the run's own, empty when the capture started), else "user" (the user's cache or
    torch's default folder, in whatever state it was)."""
    return "private" if os.environ.get(MARKER) == "1" else "user"
