"""A compile cache of the run's own, so that its compile times mean something: the capture compiles with an empty
cache (cold, as a fresh machine or CI job does) and the timed runs after it with the cache it filled (warm, as a
second run of the script on the same machine does). The user's own cache is neither read nor filled. A user who
set TORCHINDUCTOR_CACHE_DIR to a folder of their own keeps it: then the capture's compile is cold or warm as that
cache was (torch's default folder, which torch itself writes into the variable, is not such a choice)."""
from __future__ import annotations

import contextlib
import getpass
import os
import re
import shutil
import tempfile
from typing import Iterator, Optional

CACHE_VARIABLE = "TORCHINDUCTOR_CACHE_DIR"
MARKER = "DIAGNOSE_PRIVATE_COMPILE_CACHE"  # set in the children: the cache is the run's own


@contextlib.contextmanager
def private_compile_cache() -> Iterator[None]:
    """For the children started inside: the run's own inductor cache, removed afterwards (the variable as it was
    is put back)."""
    if users_cache() is not None:
        yield
        return
    before = os.environ.get(CACHE_VARIABLE)
    folder = tempfile.mkdtemp(prefix="diagnose-compile-cache-")
    os.environ[CACHE_VARIABLE], os.environ[MARKER] = folder, "1"
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(CACHE_VARIABLE, None)
        else:
            os.environ[CACHE_VARIABLE] = before
        os.environ.pop(MARKER, None)
        shutil.rmtree(folder, ignore_errors=True)


def users_cache() -> Optional[str]:
    """TORCHINDUCTOR_CACHE_DIR as the user chose it; None when unset or torch's own default folder, which torch
    writes into this process's environment the first time it compiles here (a notebook, or a caller of the Python
    API, that compiled before diagnose started): that is not a choice to keep."""
    folder = os.environ.get(CACHE_VARIABLE)
    if not folder or os.path.abspath(folder) == torch_default_cache():
        return None
    return folder


def torch_default_cache() -> str:
    """The folder torch's inductor caches in by default, named as torch._inductor.runtime.cache_dir_utils names it
    (not imported from there: diagnose's own process does not import torch)."""
    try:
        user = getpass.getuser()
    except (KeyError, ModuleNotFoundError, OSError):
        user = f"uid_{os.getuid()}" if hasattr(os, "getuid") else "unknown_user"
    return os.path.abspath(os.path.join(tempfile.gettempdir(), "torchinductor_" + re.sub(r'[\\/:*?"<>|]', "_", user)))


def cache_kind() -> str:
    """In a child: "private" (the run's own, empty when the capture started), else "user" (the folder the user set
    in TORCHINDUCTOR_CACHE_DIR, in whatever state it was)."""
    return "private" if os.environ.get(MARKER) == "1" else "user"
