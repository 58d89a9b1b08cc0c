"""find_unused_parameters=False: DistributedDataParallel stops walking the autograd graph from the outputs after
every forward to find the parameters that will get no gradient. Tried only where every parameter got a gradient in
every backward seen (otherwise DDP would wait forever for the missing ones, and raises)."""
from __future__ import annotations

from diagnose.optimizations.base import IDENTICAL
from diagnose.optimizations.ddp_setting import DdpSetting
from diagnose.optimizations.registry import register


@register
class DdpFindUnused(DdpSetting):
    id = "ddp.find_unused_parameters"
    title = "DistributedDataParallel without the search for unused parameters"
    fidelity = IDENTICAL
    keyword, value = "find_unused_parameters", False

    def ddp_skip_reason(self, ctx):
        ddp = ctx.capture.ddp
        if not ddp.find_unused_parameters:
            return super().ddp_skip_reason(ctx)
        if ddp.unused_parameters is None:
            return "no backward() through DistributedDataParallel was seen: whether every parameter gets a gradient " \
                   "is not known"
        if ddp.unused_parameters:
            return (f"{ddp.unused_parameters} parameter(s) got no gradient in a backward: DistributedDataParallel "
                    "needs find_unused_parameters=True (or static_graph=True) for them")
        return None
