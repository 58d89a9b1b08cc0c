"""Activation checkpointing: the model's top-level blocks recompute their activations in backward instead of
keeping them, trading compute for memory. Reported with the memory it saved and the time it cost."""
from __future__ import annotations

import functools

from diagnose.optimizations.base import APPROXIMATE, ModelOptimization
from diagnose.optimizations.registry import register


@register
class ActivationCheckpointing(ModelOptimization):
    id = "activation_checkpointing"
    title = "Activation checkpointing"
    fidelity = APPROXIMATE  # identical maths; dropout and other RNG use is replayed, not re-drawn

    def apply(self, setting, changes):
        from torch.utils.checkpoint import checkpoint

        def checkpoint_children(model) -> None:
            wrapped = 0
            for child in model.children():
                if next(child.parameters(), None) is None:
                    continue
                forward = child.forward
                child.forward = functools.partial(_checkpointed, checkpoint, forward)
                wrapped += 1
            changes.applied.append(f"{wrapped} top-level blocks of {type(model).__name__} checkpointed")

        changes.model_hooks.append(checkpoint_children)

    def snippet(self, setting, ctx):
        return ("from torch.utils.checkpoint import checkpoint\n"
                "def forward(self, x):\n"
                "    for block in self.blocks:\n"
                "        x = checkpoint(block, x, use_reentrant=False)\n"
                "    return x")


def _checkpointed(checkpoint, forward, *args, **kwargs):
    import torch

    if not torch.is_grad_enabled():
        return forward(*args, **kwargs)
    return checkpoint(forward, *args, use_reentrant=False, **kwargs)
