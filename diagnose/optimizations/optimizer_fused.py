"""Fused or foreach optimizer kernels instead of a Python loop over parameters."""
from __future__ import annotations

from diagnose.optimizations.base import APPROXIMATE, Context, Optimization
from diagnose.optimizations.registry import register

FUSED_TYPES = ("Adam", "AdamW", "SGD", "Adagrad")


@register
class OptimizerFused(Optimization):
    id = "optimizer.fused"
    title = "Fused / foreach optimizer"
    fidelity = APPROXIMATE
    site = "optimizer"

    def skip_reason(self, ctx: Context):
        if not ctx.capture.optimizers:
            return "the script builds no torch.optim optimizer"
        opt = ctx.capture.optimizers[0]
        if opt.fused or opt.foreach:
            return f"{opt.type} already uses fused={opt.fused} foreach={opt.foreach}"
        return None

    def settings(self, ctx):
        options = [{"foreach": True}]
        if ctx.capture.optimizers[0].type in FUSED_TYPES:
            options.append({"fused": True})
        return options

    def apply(self, setting, changes):
        def edit(defaults: dict) -> None:
            for key in ("foreach", "fused"):
                if key in defaults:
                    defaults[key] = setting.get(key, None if key == "fused" else False)

        changes.optimizer_edits.append(edit)
        changes.applied.append(", ".join(f"optimizer({k}=True)" for k in setting))

    def keyword_edits(self, setting):
        return {k: "True" for k in setting}
