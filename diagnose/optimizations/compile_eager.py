"""The script without torch.compile: its compile time against what compiling saves on each step.

Its torch.compile(...) returns the model as it is and module.compile() does nothing, so the steps run eagerly.
The measured speedup is the eager step's against the compiled one (below 1 when compiling pays per step); with
the compile time the baseline paid, it gives the break-even step count (verdict/compile_cost.py)."""
from __future__ import annotations

from typing import Optional

from diagnose.optimizations.base import IDENTICAL, Context, Optimization
from diagnose.optimizations.registry import register


@register
class CompileEager(Optimization):
    id = "compile_eager"
    title = "no torch.compile (eager)"
    fidelity = IDENTICAL  # the same computation; inductor's fused kernels may round differently in the last bits

    def skip_reason(self, ctx: Context) -> Optional[str]:
        if ctx.capture.compilation is None:
            return "the script does not call torch.compile"
        return None

    def extra_warmup_steps(self, setting, ctx):
        return 10  # the baseline beside it compiles in its first steps

    def apply(self, setting, changes):
        changes.skip_compile = True
        changes.applied.append("torch.compile skipped (eager)")

    def snippet(self, setting, ctx):
        where = ctx.capture.compilation.call_location if ctx.capture.compilation else None
        return (f"# at {where or 'the torch.compile call'}: leave the model uncompiled for a run this short\n"
                "# model = torch.compile(model)")
