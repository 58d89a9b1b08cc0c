"""diagnose: find what holds a PyTorch training script back, and say which line to change."""
from __future__ import annotations

__version__ = "0.1.0"

_step_hook = None  # set by the capture child; None when the script runs on its own


def step() -> None:
    """Mark the start of a training step. A no-op unless the script runs under `diagnose run`.

    Only needed when diagnose cannot find steps by itself (no DataLoader, no backward(), no optimizer):
        for batch in my_batches():
            diagnose.step()
            ...
    """
    if _step_hook is not None:
        _step_hook()
