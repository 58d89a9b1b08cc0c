"""More DataLoader worker processes: a sweep, past the core count when items wait on I/O rather than CPU."""
from __future__ import annotations

from diagnose.optimizations.base import Context, Optimization
from diagnose.optimizations.registry import register


@register
class NumWorkers(Optimization):
    id = "dataloader.num_workers"
    title = "DataLoader worker processes"
    site = "loader"

    def skip_reason(self, ctx: Context):
        if ctx.loader is None:
            return "the script builds no DataLoader"
        return None

    def settings(self, ctx: Context):
        current = ctx.loader.num_workers
        candidates = [2, 4, 8]
        item_cpu = ctx.metric("dataset_item_cpu_frac")
        if item_cpu is not None and item_cpu < 0.5:
            candidates.append(16)  # items wait on I/O or sleep: workers beyond the cores still help
        return [{"num_workers": n} for n in candidates if n != current]

    def extra_warmup_steps(self, setting, ctx):
        # after a slow first step the first prefetch_factor * workers batches come from a full buffer, then
        # one more burst to be back in step
        return (ctx.loader.prefetch_factor or 2) * setting["num_workers"] + setting["num_workers"]

    def burst_steps(self, setting, ctx):
        return setting["num_workers"]

    def apply(self, setting, changes):
        def edit(args: dict) -> None:
            args["num_workers"] = setting["num_workers"]
            if setting["num_workers"] == 0:
                args["persistent_workers"], args["prefetch_factor"] = False, None

        changes.loader_edits.append(edit)
        changes.applied.append(f"DataLoader(num_workers={setting['num_workers']})")

    def keyword_edits(self, setting):
        return {"num_workers": str(setting["num_workers"])}
