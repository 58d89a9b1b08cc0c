"""torch.compile on the model; compile time is reported apart from steady-state speed."""
from __future__ import annotations

from diagnose.optimizations.base import APPROXIMATE, ModelOptimization
from diagnose.optimizations.registry import register


@register
class Compile(ModelOptimization):
    id = "compile"
    title = "torch.compile"
    fidelity = APPROXIMATE

    def model_skip_reason(self, ctx):
        compilation = ctx.capture.compilation
        if compilation is not None:
            where = f" at {compilation.call_location}" if compilation.call_location else ""
            return f"the script already compiles its model{where}"
        return None

    def extra_warmup_steps(self, setting, ctx):
        return 10  # compilation and recompilations happen in the first steps

    def apply(self, setting, changes):
        changes.model_hooks.append(lambda model: model.compile())
        changes.applied.append("model.compile()")

    def snippet(self, setting, ctx):
        return "model = torch.compile(model)  # the first steps compile; the report gives that time apart"
