"""static_graph=True: DistributedDataParallel learns in the first iteration which parameters are used and in what
order their gradients are ready, then skips the search for unused parameters and can all-reduce in that order."""
from __future__ import annotations

from diagnose.optimizations.base import IDENTICAL
from diagnose.optimizations.ddp_setting import DdpSetting
from diagnose.optimizations.registry import register


@register
class DdpStaticGraph(DdpSetting):
    id = "ddp.static_graph"
    title = "DistributedDataParallel with static_graph=True"
    fidelity = IDENTICAL
    keyword, value = "static_graph", True
