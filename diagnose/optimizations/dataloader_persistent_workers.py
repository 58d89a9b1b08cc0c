"""Keep DataLoader workers alive between epochs instead of starting them again each epoch."""
from __future__ import annotations

from diagnose.optimizations.base import Context, LoaderOptimization
from diagnose.optimizations.registry import register


@register
class PersistentWorkers(LoaderOptimization):
    id = "dataloader.persistent_workers"
    title = "Persistent DataLoader workers"
    rides_with = "dataloader.num_workers"

    def loader_skip_reason(self, ctx: Context):
        if ctx.loader.num_workers == 0:
            return ("needs worker processes (num_workers=0 here): added to the best num_workers setting in `combined` "
                    "when more workers are verified faster")
        if ctx.loader.persistent_workers:
            return "already persistent_workers=True"
        return None

    def rides(self, ctx: Context) -> bool:
        return ctx.loader is not None and ctx.loader.num_workers == 0 and not ctx.loader.persistent_workers

    def settings(self, ctx):
        return [{"persistent_workers": True}]

    def apply(self, setting, changes):
        def edit(args: dict) -> None:
            if args.get("num_workers", 0) > 0:
                args["persistent_workers"] = True

        changes.loader_edits.append(edit)
        changes.applied.append("DataLoader(persistent_workers=True)")

    def keyword_edits(self, setting):
        return {"persistent_workers": "True"}
