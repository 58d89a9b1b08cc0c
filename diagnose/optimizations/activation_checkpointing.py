"""Activation checkpointing: recompute activations in backward to save memory."""
from diagnose.optimizations.recommendation import Recommendation
from diagnose.optimizations.registry import register


@register
class ActivationCheckpointing(Recommendation):
    id = "activation_checkpointing"
    title = "Activation checkpointing"
    why_not_applied = "which blocks to checkpoint is a choice about the model's structure"
    code = ("from torch.utils.checkpoint import checkpoint\n"
            "def forward(self, x):\n"
            "    for block in self.blocks:\n"
            "        x = checkpoint(block, x, use_reentrant=False)\n"
            "    return x")
