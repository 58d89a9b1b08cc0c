"""Pinned (page-locked) host memory for batches, so host-to-device copies can run asynchronously."""
from __future__ import annotations

from diagnose.optimizations.base import Context, LoaderOptimization
from diagnose.optimizations.registry import register


@register
class PinMemory(LoaderOptimization):
    id = "dataloader.pin_memory"
    title = "Pinned memory with non_blocking copies"

    def skip_reason(self, ctx: Context):
        if not ctx.cuda:  # said first: without a device, a loader would not help either
            return "no CUDA device in this run: there is no host-to-device copy to speed up"
        return super().skip_reason(ctx)

    def loader_skip_reason(self, ctx: Context):
        return "already pin_memory=True" if ctx.loader.pin_memory else None

    def settings(self, ctx):
        return [{"pin_memory": True, "non_blocking": True}]

    def apply(self, setting, changes):
        import torch

        def edit(args: dict) -> None:
            args["pin_memory"] = True

        def non_blocking_copies(model) -> None:
            original_to = torch.Tensor.to

            def to(self, *args, **kwargs):  # batches move with non_blocking=True once they are pinned
                if self.is_pinned():
                    kwargs.setdefault("non_blocking", True)
                return original_to(self, *args, **kwargs)

            torch.Tensor.to = to

        changes.loader_edits.append(edit)
        changes.model_hooks.append(non_blocking_copies)
        changes.applied.append("DataLoader(pin_memory=True); pinned tensors copied with non_blocking=True")

    def keyword_edits(self, setting):
        return {"pin_memory": "True"}

    def snippet(self, setting, ctx):
        return "x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)"
