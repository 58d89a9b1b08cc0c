"""Dynamic shapes for a model that recompiles on every new input size: torch.compile's dynamic= changed.

The script's own torch.compile(...) / module.compile(...) call runs with another `dynamic=`: None (torch's default,
automatic: a dimension seen to change is compiled again once, symbolically) or True (symbolic from the start).
Compile time is part of what it changes: the timed runs report it apart, and the verdict counts it over the run."""
from __future__ import annotations

from typing import Optional

from diagnose.optimizations.base import IDENTICAL, Context, Optimization
from diagnose.optimizations.registry import register


@register
class CompileDynamic(Optimization):
    id = "compile_dynamic"
    title = "dynamic shapes in torch.compile"
    fidelity = IDENTICAL  # the same computation, traced with symbolic sizes
    site = "compile"

    def skip_reason(self, ctx: Context) -> Optional[str]:
        compilation = ctx.capture.compilation
        if compilation is None:
            return "the script does not call torch.compile"
        if compilation.dynamic is True:
            return "the script already compiles with dynamic=True"
        return None

    def settings(self, ctx: Context) -> list[dict]:
        # torch's default (None: a dimension seen to change is recompiled once, symbolically) for a script that
        # turned it off; for one that left it there, symbolic from the start
        if ctx.capture.compilation is not None and ctx.capture.compilation.dynamic is None:
            return [{"dynamic": True}]
        return [{"dynamic": None}]

    def extra_warmup_steps(self, setting, ctx):
        return 10  # the compilations (and the one recompilation that makes a dimension symbolic) come first

    def apply(self, setting, changes):
        dynamic = setting.get("dynamic")

        def edit(kwargs: dict) -> None:
            kwargs["dynamic"] = dynamic

        changes.compile_edits.append(edit)
        changes.applied.append(f"torch.compile(..., dynamic={dynamic})")

    def keyword_edits(self, setting):
        return {"dynamic": repr(setting.get("dynamic"))}

    def snippet(self, setting, ctx):
        return (f"model = torch.compile(model, dynamic={setting.get('dynamic')!r})  # a size that changes from batch "
                "to batch compiled once, symbolically")
