"""What a plain `python train.py` pays before the script's first line, measured in the child: the interpreter's start
(the process's start, the kernel's record at 10 ms, to the child's first line) and torch's import, timed on its own;
diagnose's other imports and its set-up are left out. A module of its own: the child runs as `__main__`, so what it
measures is kept where the session can import it."""
from __future__ import annotations

import time
from typing import Optional

_seconds: Optional[float] = None


def import_torch_timed(entered_at: float) -> None:
    """`entered_at`: time.time() at the child's first line."""
    global _seconds
    started = time.monotonic()
    import torch  # noqa: F401

    torch_s = time.monotonic() - started
    try:
        import psutil

        _seconds = max(0.0, entered_at - psutil.Process().create_time()) + torch_s
    except Exception:  # no process record: unknown, not a guess
        _seconds = None


def seconds() -> Optional[float]:
    return _seconds
