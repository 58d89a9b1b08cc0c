"""Mixed precision: autocast to bf16 where supported, else fp16 with a GradScaler (CUDA); bf16 on CPU."""
from __future__ import annotations

import functools
import types

from diagnose.optimizations.base import APPROXIMATE, Context, ModelOptimization
from diagnose.optimizations.registry import register


@register
class Amp(ModelOptimization):
    id = "amp"
    title = "Mixed precision (autocast)"
    fidelity = APPROXIMATE

    def model_skip_reason(self, ctx: Context):
        if ctx.capture.model.dtype not in ("float32",):
            return f"the model already runs in {ctx.capture.model.dtype}"
        low = [d for d in ctx.capture.autocast_dtypes if d in ("bfloat16", "float16")]
        if low:  # only enabled regions are recorded: autocast(enabled=False) leaves the model in fp32, worth trying
            return f"the script already runs under autocast ({', '.join(low)})"
        return None

    def settings(self, ctx):
        device = "cuda" if ctx.cuda else "cpu"
        return [{"device": device, "dtype": "bfloat16" if device == "cpu" else "auto"}]

    def apply(self, setting, changes):
        import torch

        device = setting["device"]
        dtype = torch.bfloat16
        scaler = None
        if device == "cuda" and not torch.cuda.is_bf16_supported():
            # torch.amp.GradScaler from torch 2.3; torch.cuda.amp's before (pyproject admits torch >= 2.1)
            scaler = torch.amp.GradScaler("cuda") if hasattr(torch.amp, "GradScaler") else torch.cuda.amp.GradScaler()
            dtype = torch.float16

        def autocast_forward(model) -> None:
            forward = model.forward

            @functools.wraps(forward)
            def forward_in_autocast(*args, **kwargs):
                with torch.autocast(device_type=device, dtype=dtype):
                    return forward(*args, **kwargs)

            model.forward = forward_in_autocast

        changes.model_hooks.append(autocast_forward)
        if scaler is not None:
            changes.loss_transforms.append(scaler.scale)
            changes.optimizer_hooks.append(lambda opt: _scaled_step(opt, scaler))
        changes.applied.append(f"torch.autocast({device}, {str(dtype).replace('torch.', '')})"
                               + (" with GradScaler" if scaler else ""))

    def snippet(self, setting, ctx):
        device = setting["device"]
        return (f'with torch.autocast(device_type="{device}", dtype=torch.bfloat16):\n'
                "    loss = loss_fn(model(x), y)\n"
                "loss.backward()  # on GPUs without bf16: dtype=torch.float16 plus torch.amp.GradScaler")


def _scaled_step(optimizer, scaler) -> None:
    """step() through the scaler, then update(). Bound as a method (an LRScheduler made later wraps
    step.__func__); what wrapped it since (another change's hook, a scheduler) is put back after each call."""
    step = optimizer.step

    def scaled_step(opt, *args, **kwargs):
        current, optimizer.step = optimizer.step, step  # GradScaler calls optimizer.step itself
        try:
            return scaler.step(optimizer, *args, **kwargs)
        finally:
            scaler.update()
            optimizer.step = current

    optimizer.step = types.MethodType(scaled_step, optimizer)
