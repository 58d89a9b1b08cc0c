"""Base for DistributedDataParallel's constructor settings: the experiment passes them to the script's own
DistributedDataParallel(...) call on every rank (the diff edits that call); not tried without one."""
from __future__ import annotations

from typing import Any, Optional

from diagnose.optimizations.base import Context, Optimization


class DdpSetting(Optimization):
    """One keyword of the constructor set to one value (`keyword`, `value`), or settings() of its own."""
    site = "ddp"
    keyword = ""
    value: Any = None

    def skip_reason(self, ctx: Context) -> Optional[str]:
        if ctx.capture.ddp is None:
            return "the script builds no DistributedDataParallel"
        return self.ddp_skip_reason(ctx)

    def ddp_skip_reason(self, ctx: Context) -> Optional[str]:
        """Why not, once there is a DistributedDataParallel (None: it can be tried)."""
        if self.keyword and getattr(ctx.capture.ddp, self.keyword) == self.value:
            return f"{self.keyword} is {self.value} already"
        return None

    def settings(self, ctx: Context) -> list[dict[str, Any]]:
        return [{self.keyword: self.value}]

    def apply(self, setting: dict[str, Any], changes) -> None:
        def edit(arguments: dict) -> None:
            arguments.update(setting)

        changes.ddp_edits.append(edit)
        changes.applied.append("DistributedDataParallel(" + ", ".join(f"{k}={v!r}" for k, v in setting.items()) + ")")

    def keyword_edits(self, setting):
        return {k: repr(v) for k, v in setting.items()}
