"""Let each DataLoader worker prepare more batches ahead, to absorb bursts of slow items."""
from __future__ import annotations

from diagnose.optimizations.base import Context, LoaderOptimization
from diagnose.optimizations.registry import register


@register
class PrefetchFactor(LoaderOptimization):
    id = "dataloader.prefetch_factor"
    title = "Deeper DataLoader prefetching"

    def loader_skip_reason(self, ctx: Context):
        if ctx.loader.num_workers == 0:
            return "needs worker processes (num_workers=0 here)"
        return None

    def settings(self, ctx):
        return [{"prefetch_factor": 4}]

    def extra_warmup_steps(self, setting, ctx):
        return 3 * ctx.loader.num_workers * setting["prefetch_factor"]

    def apply(self, setting, changes):
        def edit(args: dict) -> None:
            if args.get("num_workers", 0) > 0:
                args["prefetch_factor"] = setting["prefetch_factor"]

        changes.loader_edits.append(edit)
        changes.applied.append(f"DataLoader(prefetch_factor={setting['prefetch_factor']})")

    def keyword_edits(self, setting):
        return {"prefetch_factor": str(setting["prefetch_factor"])}
