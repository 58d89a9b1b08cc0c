"""channels_last memory format for convolutional models (NHWC kernels)."""
from __future__ import annotations

from diagnose.optimizations.base import APPROXIMATE, Context, Optimization
from diagnose.optimizations.registry import register


@register
class ChannelsLast(Optimization):
    id = "channels_last"
    title = "channels_last memory format"
    fidelity = APPROXIMATE

    def skip_reason(self, ctx: Context):
        model = ctx.capture.model
        if model is None or not model.conv_layers:
            return "needs a model with 2-D convolutions"
        return None

    def apply(self, setting, changes):
        import torch

        def convert(model) -> None:
            model.to(memory_format=torch.channels_last)

            def inputs_channels_last(module, args):
                return tuple(a.contiguous(memory_format=torch.channels_last)
                             if isinstance(a, torch.Tensor) and a.dim() == 4 else a for a in args)

            model.register_forward_pre_hook(inputs_channels_last)

        changes.model_hooks.append(convert)
        changes.applied.append("model and 4-D inputs in channels_last")

    def snippet(self, setting, ctx):
        return ("model = model.to(memory_format=torch.channels_last)\n"
                "x = x.contiguous(memory_format=torch.channels_last)")
