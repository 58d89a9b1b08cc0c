"""Base for optimizations diagnose recommends with code but does not apply to the script by itself."""
from __future__ import annotations

from diagnose.optimizations.base import Context, Optimization


class Recommendation(Optimization):
    applied_automatically = False
    why_not_applied = ""
    code = ""

    def skip_reason(self, ctx: Context):
        return f"recommendation only, not applied automatically: {self.why_not_applied}"

    def snippet(self, setting, ctx):
        return self.code
