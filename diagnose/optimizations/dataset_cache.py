"""Cache each item of a deterministic dataset in memory after its first fetch."""
from __future__ import annotations

import math

from diagnose.optimizations.base import Context, Optimization
from diagnose.optimizations.registry import register

MEMORY_SHARE = 0.25  # never plan a cache larger than this share of the machine's RAM
MAX_WARM_EPOCH_S = 60.0  # the cache pays off from the second epoch: one epoch must fit the warm-up


class CachedDataset:
    """Wraps a map-style dataset; the first fetch of each index is kept (in this process)."""

    def __init__(self, dataset):
        self.dataset, self.items = dataset, {}

    def __len__(self):
        return len(self.dataset)

    def __getitem__(self, index):
        item = self.items.get(index)
        if item is None:
            item = self.items[index] = self.dataset[index]
        return item

    def __getattr__(self, name):  # user code may read attributes of its dataset through the loader
        if name in ("dataset", "items"):
            raise AttributeError(name)
        return getattr(self.dataset, name)


@register
class DatasetCache(Optimization):
    id = "dataset.cache"
    title = "Cache preprocessed items in memory"
    site = "loader"
    conflicts_with = ("dataloader.num_workers", "dataloader.persistent_workers", "dataloader.prefetch_factor")

    def skip_reason(self, ctx: Context):
        loader, probe = ctx.loader, ctx.capture.dataset_probe
        if loader is None or loader.dataset_len is None:
            return "needs a map-style dataset with a length"
        if probe is None or probe.deterministic is None:
            return f"could not check the dataset: {probe.reason if probe else 'no probe'}"
        if not probe.deterministic:
            return ("the dataset is random (the same index gave different items, e.g. augmentation): "
                    "caching would change training")
        size = (probe.item_bytes or 0) * loader.dataset_len
        if size > MEMORY_SHARE * ctx.capture.environment.total_memory_bytes:
            return f"too large to cache: about {size / 2**30:.1f} GiB for {loader.dataset_len} items"
        epoch_s = self._epoch_s(ctx)
        if epoch_s > MAX_WARM_EPOCH_S:
            return f"one epoch takes about {epoch_s:.0f} s, too long to fill the cache within the experiment budget"
        return None

    def _epoch_s(self, ctx: Context) -> float:
        loader = ctx.loader
        return (ctx.capture.dataset_probe.item_s or 0.0) * loader.dataset_len

    def steps_per_epoch(self, ctx: Context) -> int:
        return math.ceil(ctx.loader.dataset_len / max(1, ctx.loader.batch_size or 1))

    def extra_warmup_steps(self, setting, ctx):
        return self.steps_per_epoch(ctx) + 3  # measure in the second epoch, with the cache full

    def apply(self, setting, changes):
        def edit(args: dict) -> None:
            args["dataset"] = CachedDataset(args["dataset"])
            # cached items are instant: workers would each hold a separate, mostly cold copy of the cache
            args["num_workers"], args["persistent_workers"], args["prefetch_factor"] = 0, False, None

        changes.loader_edits.append(edit)
        changes.applied.append("dataset wrapped in an in-memory cache (filled during the first epoch), num_workers=0")

    def snippet(self, setting, ctx):
        return (
            "class Cached(torch.utils.data.Dataset):\n"
            "    def __init__(self, dataset):\n"
            "        self.dataset, self.items = dataset, {}\n"
            "    def __len__(self):\n"
            "        return len(self.dataset)\n"
            "    def __getitem__(self, i):\n"
            "        if i not in self.items:\n"
            "            self.items[i] = self.dataset[i]\n"
            "        return self.items[i]\n\n"
            "loader = DataLoader(Cached(dataset), ...)  # keep random augmentation outside the cache"
        )
