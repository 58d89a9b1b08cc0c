"""Gradient accumulation: micro-batches of half the size, two backward passes per optimizer step, the same
effective batch, less activation memory; under DistributedDataParallel the micro-batches before the last run under
no_sync() (one all-reduce per optimizer step, not one per micro-batch). Reported with the memory it saved and the
time it cost. Where the largest batch that fits was measured (a run out of memory), the fewest micro-batches whose
size fits it."""
from __future__ import annotations

from diagnose.optimizations.accumulating import every_kth_step
from diagnose.optimizations.base import APPROXIMATE, Context, Optimization
from diagnose.optimizations.registry import register
from diagnose.optimizations.syncing import sync_only_last

MICRO_BATCHES = 2


@register
class GradAccumulation(Optimization):
    id = "grad_accumulation"
    title = "Gradient accumulation"
    fidelity = APPROXIMATE  # same effective batch; batch-norm statistics see smaller batches
    metric = "samples/s"
    site = "loader"
    snippet_too = True  # a smaller batch alone would change the effective batch: the loop is the other half

    def skip_reason(self, ctx: Context):
        loader = ctx.loader
        if loader is None or not loader.batch_size or loader.batch_size < 2 * MICRO_BATCHES:
            return "needs a DataLoader with a batch size of at least 4 to split into micro-batches"
        if not ctx.capture.optimizers:
            return "needs a torch.optim optimizer"
        if ctx.capture.ddp is not None and ctx.capture.micro_batches_per_step > 1:
            return (f"the script accumulates {ctx.capture.micro_batches_per_step} micro-batches per step already: "
                    "under DistributedDataParallel no_sync() on them is the change (ddp.no_sync)")
        return None

    def settings(self, ctx):
        """Two micro-batches; where the largest batch that fits was measured, the fewest micro-batches that fit
        it and twice as many (more headroom, for the time it costs): the faster that fits wins."""
        size = ctx.loader.batch_size
        # a loop that accumulates already: a framework's setting replaces its count, so it says the product
        accumulating = ctx.capture.micro_batches_per_step
        already = {"accumulating": accumulating} if accumulating > 1 else {}
        ddp = ctx.capture.ddp
        if ddp is not None:  # its micro-batches before the last run under no_sync(), or each would all-reduce
            already["ddp_syncs"] = ddp.synced_backwards_per_step or 1
        if not ctx.largest_batch or ctx.largest_batch >= size:  # the batch fits: halve it, as to save memory
            return [{"micro_batches": MICRO_BATCHES, "batch_size": size // MICRO_BATCHES, **already}]
        fewest = micro_batches_to_fit(size, ctx.largest_batch)
        counts = [fewest] + ([micro_batches_to_fit(size, size // fewest // 2)] if size // fewest >= 4 else [])
        return [{"micro_batches": k, "batch_size": size // k, **already} for k in dict.fromkeys(counts)]

    def apply(self, setting, changes):
        k = setting["micro_batches"]

        def smaller_batches(args: dict) -> None:
            if args.get("batch_sampler") is None:  # see batch_size: accelerate re-makes the loader from its sampler
                args["batch_size"] = setting["batch_size"]

        changes.loader_edits.append(smaller_batches)
        changes.loss_transforms.append(lambda loss: loss / k)
        changes.optimizer_hooks.append(lambda opt: every_kth_step(opt, k))
        if "ddp_syncs" in setting:  # the script's synced forwards, k of them per optimizer step now
            changes.ddp_hooks.append(lambda ddp: sync_only_last(ddp, k * setting["ddp_syncs"]))
        changes.applied.append(f"batch_size={setting['batch_size']} x {k} micro-batches per optimizer step")

    def keyword_edits(self, setting):
        return {"batch_size": str(setting["batch_size"])}

    def snippet(self, setting, ctx):
        k = setting["micro_batches"]
        return (f"for i, (x, y) in enumerate(loader):  # batch_size={setting['batch_size']}\n"
                f"    (loss_fn(model(x), y) / {k}).backward()\n"
                f"    if (i + 1) % {k} == 0:\n"
                "        optimizer.step()\n        optimizer.zero_grad()")


def micro_batches_to_fit(batch: int, largest: int) -> int:
    """The fewest micro-batches (at least two) of at most `largest` samples that make up `batch` exactly, so the
    effective batch stays the same; when no divisor gives that, the fewest that fit (the effective batch then
    loses the remainder)."""
    fewest = max(MICRO_BATCHES, -(-batch // max(1, largest)))
    exact = [k for k in range(fewest, batch + 1) if batch % k == 0]
    return exact[0] if exact and exact[0] <= 2 * fewest else fewest
