"""A larger batch: more samples per op, until throughput stops improving or memory reaches 80-95%. Where the
largest batch that fits was searched (experiments/batch_search.py), the settings stop there and include it."""
from __future__ import annotations

from diagnose.optimizations.base import DYNAMICS, Context, LoaderOptimization
from diagnose.optimizations.registry import register

FACTORS = (4, 16)


@register
class BatchSize(LoaderOptimization):
    id = "batch_size"
    title = "Larger batch"
    fidelity = DYNAMICS
    metric = "samples/s"
    no_loader_reason = "the script builds no DataLoader whose batch size could change"

    def loader_skip_reason(self, ctx: Context):
        loader = ctx.loader
        if loader.batch_size is None:
            return "the DataLoader uses a batch_sampler: its batch size is not a DataLoader argument"
        if ctx.largest_batch is not None and ctx.largest_batch <= loader.batch_size:
            return f"no larger batch fits in memory: the largest that fitted was {ctx.largest_batch} (batch search)"
        peak = ctx.metric("peak_memory_frac")
        if ctx.largest_batch is None and ctx.cuda and peak is not None and peak >= 0.8:
            return f"device memory is already at {peak:.0%}"
        return None

    def settings(self, ctx):
        size, length = ctx.loader.batch_size, ctx.loader.dataset_len
        most = length // 8 if length else None  # eight steps an epoch at least, to time windows of steps
        sizes = [size * f for f in FACTORS if most is None or size * f <= most]
        if ctx.largest_batch is not None:
            top = min(ctx.largest_batch, most) if most else ctx.largest_batch
            sizes = [b for b in sizes if b < top] + ([top] if top > size else [])
        return [{"batch_size": b} for b in sizes]

    def apply(self, setting, changes):
        def edit(args: dict) -> None:
            if args.get("batch_sampler") is None:  # a loader re-made from one already edited (accelerate) keeps its
                args["batch_size"] = setting["batch_size"]  # batch_sampler, which has the new size

        changes.loader_edits.append(edit)
        changes.applied.append(f"DataLoader(batch_size={setting['batch_size']})")

    def keyword_edits(self, setting):
        return {"batch_size": str(setting["batch_size"])}

    def snippet(self, setting, ctx):
        factor = setting["batch_size"] // max(1, ctx.loader.batch_size)
        return f"# batch {factor}x larger: scale the learning rate too (e.g. lr * {factor}, with warm-up)"
