"""Base for backend flags that only matter on CUDA."""
from __future__ import annotations

from diagnose.optimizations.base import APPROXIMATE, Context, Optimization


class CudaFlag(Optimization):
    fidelity = APPROXIMATE
    code = ""

    def skip_reason(self, ctx: Context):
        return None if ctx.cuda else "needs a CUDA device; this run used the CPU"

    def snippet(self, setting, ctx):
        return self.code

