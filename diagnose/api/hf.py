"""The Hugging Face Trainer's door: a TrainerCallback that profiles a window of a long run (diagnose.api.window)
and lets training go on. Steps are the Trainer's optimizer steps (state.global_step)."""
from __future__ import annotations

from pathlib import Path
from typing import Optional, Union

from transformers import TrainerCallback

from diagnose.api.window import Window


class HuggingFaceCallback(TrainerCallback):
    """Trainer(..., callbacks=[diagnose.HuggingFaceCallback(at_step=200, steps=10)]); after training,
    `callback.result()` waits for the analysis and returns the diagnosis (rank 0)."""

    def __init__(self, at_step: Optional[int] = None, steps: int = 10, *, when_slower: Optional[float] = None,
                 out: Union[str, Path, None] = None, quiet: bool = False):
        self.window = Window(at_step, steps, when_slower=when_slower, out=out, quiet=quiet)

    def on_step_begin(self, args, state, control, **kwargs):
        self.window.step(state.global_step)

    def on_train_end(self, args, state, control, **kwargs):
        self.window.close()

    def result(self, timeout: Optional[float] = None):
        return self.window.result(timeout)
