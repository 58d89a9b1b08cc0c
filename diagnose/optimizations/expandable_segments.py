"""The CUDA caching allocator's expandable segments, against fragmentation: segments grow in place instead of a
new block being needed for each size, so memory reserved but unused (split blocks) can serve a larger request.
Read once, when the allocator starts: set in the child's environment before it starts."""
from __future__ import annotations

import os

from diagnose.optimizations.base import IDENTICAL
from diagnose.optimizations.cuda_flag import CudaFlag
from diagnose.optimizations.registry import register

ALLOC_CONF = "PYTORCH_CUDA_ALLOC_CONF"


@register
class ExpandableSegments(CudaFlag):
    fidelity = IDENTICAL  # where tensors live, not what they hold
    id = "expandable_segments"
    title = "Expandable allocator segments"
    code = f'{ALLOC_CONF}=expandable_segments:True python train.py  # or os.environ[...] before importing torch'

    def skip_reason(self, ctx):
        if "expandable_segments:true" in os.environ.get(ALLOC_CONF, "").lower().replace(" ", ""):
            return f"already set ({ALLOC_CONF}={os.environ[ALLOC_CONF]})"
        return super().skip_reason(ctx)

    def environment(self, setting):
        current = os.environ.get(ALLOC_CONF, "")
        return {ALLOC_CONF: ",".join(filter(None, [current, "expandable_segments:True"]))}

    def apply(self, setting, changes):
        if "expandable_segments:True" in os.environ.get(ALLOC_CONF, ""):
            changes.applied.append(f"{ALLOC_CONF}={os.environ[ALLOC_CONF]}")
