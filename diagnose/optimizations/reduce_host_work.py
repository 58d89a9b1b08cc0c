"""Less host work per step: log, print and sync every N steps, not every step. In the script's own code it is a
recommendation (the finding names the line); under a framework whose loop logs every few steps (Hugging Face
Trainer's logging_steps, Lightning's log_every_n_steps) it is that setting, applied and measured through the
framework (optimizations/runtime.py)."""
from __future__ import annotations

from typing import Optional

import diagnose.frameworks.catalog as frameworks
from diagnose.frameworks.framework import LOG_EVERY
from diagnose.optimizations.base import IDENTICAL, Context, Optimization
from diagnose.optimizations.registry import register


@register
class ReduceHostWork(Optimization):
    id = "reduce_host_work"
    title = "Less host work per step"
    fidelity = IDENTICAL  # the same training; only what is logged on the way thins out
    code = "if step % 100 == 0:\n    log_metrics(...)  # was: every step"

    def skip_reason(self, ctx: Context) -> Optional[str]:
        site = ctx.capture.framework
        framework = frameworks.get(site.name) if site else None
        if framework is None or self.id not in framework.applied_as_setting:
            return ("recommendation only, not applied automatically: the host work is the script's own code "
                    "(the finding names the line)")
        covered = framework.already(self.id, site.settings)
        return f"{framework.call}: {covered}; the per-step host work is elsewhere" if covered else None

    def settings(self, ctx):
        return [{"every": LOG_EVERY}]

    def apply(self, setting, changes):
        raise NotImplementedError(f"{self.id} is applied only as a framework's setting (optimizations/runtime.py)")

    def snippet(self, setting, ctx):
        return self.code
