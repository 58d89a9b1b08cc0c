"""gradient_as_bucket_view=True: the parameters' .grad are views into DistributedDataParallel's all-reduce buckets,
so the gradients are not copied into the buckets and back (less memory, fewer copies)."""
from __future__ import annotations

from diagnose.optimizations.base import IDENTICAL
from diagnose.optimizations.ddp_setting import DdpSetting
from diagnose.optimizations.registry import register


@register
class DdpBucketView(DdpSetting):
    id = "ddp.gradient_as_bucket_view"
    title = "DistributedDataParallel with gradient_as_bucket_view=True"
    fidelity = IDENTICAL
    keyword, value = "gradient_as_bucket_view", True
