"""reshard_after_forward=False on every FSDP2 unit: the parameters gathered for a unit's forward stay gathered
until its backward, so backward gathers none again (fewer all-gathers per step, more memory: each unit's whole
parameters live from its forward to its backward)."""
from __future__ import annotations

from diagnose.optimizations.base import IDENTICAL, Optimization
from diagnose.optimizations.registry import register


@register
class FsdpReshard(Optimization):
    id = "fsdp.reshard_after_forward"
    title = "FSDP2 units that keep their parameters gathered from forward to backward"
    fidelity = IDENTICAL  # the same parameters and gradients; more memory

    def skip_reason(self, ctx):
        fsdp = ctx.capture.fsdp
        if fsdp is None:
            return "the script calls no FSDP2 fully_shard()"
        if all(value in ("False", "0") for value in fsdp.reshard_after_forward[:-1]):
            return "its units keep their parameters gathered already (reshard_after_forward=False)"
        return None

    def settings(self, ctx):
        return [{"reshard_after_forward": False}]

    def apply(self, setting, changes):
        def edit(kwargs: dict) -> None:
            kwargs["reshard_after_forward"] = setting["reshard_after_forward"]

        changes.fsdp_edits.append(edit)
        changes.applied.append("fully_shard(..., reshard_after_forward=False) on every unit")

    def snippet(self, setting, ctx):
        return ("for block in model.blocks:  # each unit: its parameters stay gathered from forward to backward\n"
                "    fully_shard(block, reshard_after_forward=False)\n"
                "fully_shard(model)")
