"""no_sync() on an accumulation's micro-batches before the last: the script accumulates gradients over several
backward() calls per optimizer step, and DistributedDataParallel all-reduces after every one of them; under
no_sync() the micro-batches before the last accumulate locally and one all-reduce per step carries their sum. The
same averaged gradients reach the optimizer (summed in another order)."""
from __future__ import annotations

from diagnose.optimizations.base import APPROXIMATE
from diagnose.optimizations.ddp_setting import DdpSetting
from diagnose.optimizations.registry import register
from diagnose.optimizations.syncing import sync_only_last


@register
class DdpNoSync(DdpSetting):
    id = "ddp.no_sync"
    title = "no_sync() on the micro-batches before the last of an accumulation"
    fidelity = APPROXIMATE  # the same sums, added in another order (floating point)
    site = None  # a change to the loop, not to a call's arguments: shown as code

    def ddp_skip_reason(self, ctx):
        ddp = ctx.capture.ddp
        if not ddp.backwards_per_step or ddp.backwards_per_step < 2:
            return "the script does not accumulate gradients (one backward() per optimizer step)"
        if not ddp.synced_backwards_per_step or ddp.synced_backwards_per_step < 2:
            return "its micro-batches before the last run under no_sync() already"
        return None

    def settings(self, ctx):
        return [{"micro_batches": ctx.capture.ddp.synced_backwards_per_step}]

    def apply(self, setting, changes):
        k = setting["micro_batches"]
        changes.ddp_hooks.append(lambda ddp: sync_only_last(ddp, k))
        changes.applied.append(f"no_sync() on the first {k - 1} of {k} micro-batches per optimizer step")

    def keyword_edits(self, setting):
        return {}

    def snippet(self, setting, ctx):
        k = setting["micro_batches"]
        return (f"for i, (x, y) in enumerate(loader):  # {k} micro-batches per optimizer step\n"
                f"    last = (i + 1) % {k} == 0\n"
                "    with contextlib.nullcontext() if last else model.no_sync():  # model: the DDP wrapper\n"
                f"        (loss_fn(model(x), y) / {k}).backward()\n"
                "    if last:\n"
                "        optimizer.step()\n        optimizer.zero_grad()")
