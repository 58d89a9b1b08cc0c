"""Lightning's door: a Callback that profiles a window of a long run (diagnose.api.window) and lets training go
on. Steps are optimizer steps (trainer.global_step): the micro-batches of gradient accumulation share one."""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Optional, Union

from diagnose.api.window import Window

if "pytorch_lightning" in sys.modules and "lightning" not in sys.modules:  # the Trainer checks its own package's class
    from pytorch_lightning import Callback
else:
    try:
        from lightning.pytorch import Callback
    except ImportError:
        from pytorch_lightning import Callback


class LightningCallback(Callback):
    """Trainer(..., callbacks=[diagnose.LightningCallback(at_step=200, steps=10)]); after training,
    `callback.result()` waits for the analysis and returns the diagnosis (rank 0)."""

    def __init__(self, at_step: Optional[int] = None, steps: int = 10, *, when_slower: Optional[float] = None,
                 out: Union[str, Path, None] = None, quiet: bool = False):
        self.window = Window(at_step, steps, when_slower=when_slower, out=out, quiet=quiet)

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        self.window.step(trainer.global_step)

    def on_train_end(self, trainer, pl_module):
        self.window.close()

    def result(self, timeout: Optional[float] = None):
        return self.window.result(timeout)
