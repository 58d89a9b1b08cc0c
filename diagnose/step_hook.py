"""The hook behind `diagnose.step()`: set by what watches the script (the capture child, a %%diagnose cell), None
when the script runs on its own. A module of its own that imports nothing, so that the capture sets it without
importing the package's public face (which reaches the whole pipeline by name)."""
from __future__ import annotations

from typing import Callable, Optional

hook: Optional[Callable[[], None]] = None


def step() -> None:
    if hook is not None:
        hook()
