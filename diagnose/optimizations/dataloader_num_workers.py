"""More DataLoader worker processes: a sweep, past the core count when items wait on I/O rather than CPU."""
from __future__ import annotations

from typing import Optional

from diagnose.optimizations.base import Context, LoaderOptimization
from diagnose.optimizations.registry import register


def unsharded_stream_reason(ctx: Context) -> Optional[str]:
    """Why workers must not be added to this loader: an IterableDataset they would each replay (or one whose split
    could not be checked). None for map-style datasets and sharded streams."""
    loader, probe = ctx.loader, ctx.capture.dataset_probe
    if loader is None or loader.dataset_kind != "iterable":
        return None
    if probe is not None and probe.stream_sharded:
        return None
    if probe is not None and probe.stream_sharded is False:
        return (f"not run: the IterableDataset ({loader.dataset_type}) does not split its stream across workers, so "
                "each worker would replay it and feed every sample once per worker (steps/s would rise on duplicated "
                "data); shard it with get_worker_info() first (see the finding's fix)")
    note = probe.stream_note if probe is not None else "the stream was not probed"
    return (f"not run: whether the IterableDataset ({loader.dataset_type}) splits its stream across workers is "
            f"unknown ({note}); workers that replay it would feed duplicated samples")


@register
class NumWorkers(LoaderOptimization):
    id = "dataloader.num_workers"
    title = "DataLoader worker processes"

    def loader_skip_reason(self, ctx: Context):
        return unsharded_stream_reason(ctx)

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
