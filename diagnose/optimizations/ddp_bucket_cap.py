"""A sweep of DistributedDataParallel's bucket_cap_mb: smaller buckets start all-reducing earlier in the backward
(more overlap, more calls), larger ones make fewer, longer all-reduces. Which wins depends on the backend and the
model: both directions are measured. Not tried where every gradient fits DDP's first bucket (1 MiB) already."""
from __future__ import annotations

from diagnose.optimizations.base import APPROXIMATE
from diagnose.optimizations.ddp_setting import DdpSetting
from diagnose.optimizations.registry import register

FIRST_BUCKET_MB = 1.0  # torch.distributed's _DEFAULT_FIRST_BUCKET_BYTES: the first bucket whatever the cap
FACTOR = 4  # the sweep: the cap divided and multiplied by this


@register
class DdpBucketCap(DdpSetting):
    id = "ddp.bucket_cap_mb"
    title = "DistributedDataParallel bucket size (bucket_cap_mb)"
    fidelity = APPROXIMATE  # the same sums, added in another order (floating point)

    def ddp_skip_reason(self, ctx):
        gradient_mb = ctx.capture.ddp.gradient_bytes / 2**20
        if gradient_mb <= FIRST_BUCKET_MB:
            return f"its gradients ({gradient_mb:.2f} MiB) fit DistributedDataParallel's first bucket: one all-reduce"
        return None

    def settings(self, ctx):
        cap = ctx.capture.ddp.bucket_cap_mb
        smaller, larger = max(FIRST_BUCKET_MB, round(cap / FACTOR, 1)), round(cap * FACTOR, 1)
        return [{"bucket_cap_mb": v} for v in dict.fromkeys((smaller, larger)) if v != cap]
