"""An optimization: what it changes, when it applies, how it is applied at runtime, and what to show."""
from __future__ import annotations

from typing import Any, Optional

from diagnose.analysis.metrics import METRICS
from diagnose.capture.changes import ChangeSet
from diagnose.lean_dataclass import dataclass
from diagnose.model import Analysis, Capture

IDENTICAL, APPROXIMATE, DYNAMICS = "identical", "approximate", "changes-dynamics"


@dataclass(frozen=True)
class Context:
    capture: Capture
    analysis: Optional[Analysis]  # None: the script ran out of memory before a step was profiled
    largest_batch: Optional[int] = None  # the largest batch verified to fit under the memory limit, when searched

    @property
    def loader(self):
        """The loader to change: the one training waited on most, else the training loader."""
        c = self.capture
        index = c.wait_loader if c.wait_loader is not None else c.train_loader
        return c.loaders[index] if index is not None and c.loaders else None

    @property
    def cuda(self) -> bool:
        return self.capture.memory_kind == "cuda" or bool(self.capture.model
                                                           and self.capture.model.device.startswith("cuda"))

    @property
    def cpu_count(self) -> int:
        return self.capture.environment.cpu_count

    def metric(self, name: str) -> Optional[float]:
        """A metric of the analysis (None: unknown for this run); a name the registry lacks is a bug, said loudly."""
        if name not in METRICS:
            raise KeyError(f"no metric named {name!r} in diagnose/analysis/metrics.py")
        return self.analysis.metrics.get(name) if self.analysis is not None else None


class Optimization:
    id: str = ""
    title: str = ""
    fidelity: str = IDENTICAL
    applied_automatically: bool = True
    metric: str = "steps/s"
    site: Optional[str] = None  # "loader", "optimizer" or "compile": the call a diff edits
    # statements that do what the hook does, put after the script's `import torch` when the change is handed back
    module_code: str = ""
    snippet_too: bool = False  # the keyword edit at `site` is half the change: the snippet shows the rest
    conflicts_with: tuple[str, ...] = ()  # optimizations that cannot be combined with this one
    # skipped alone because it needs another one (persistent workers need workers): joins that one's best setting
    # in `combined`, when it is verified faster and rides(ctx) says this script needs it
    rides_with: Optional[str] = None

    def skip_reason(self, ctx: Context) -> Optional[str]:
        """Why this cannot be tried on this run (None: it can)."""
        return None

    def settings(self, ctx: Context) -> list[dict[str, Any]]:
        """Settings to try; more than one is a sweep of which the best is kept."""
        return [{}]

    def extra_warmup_steps(self, setting: dict[str, Any], ctx: Context) -> int:
        return 0

    def rides(self, ctx: Context) -> bool:
        """Whether to join rides_with's winner in `combined` for this script (not when already set, say)."""
        return False

    def burst_steps(self, setting: dict[str, Any], ctx: Context) -> Optional[int]:
        """Batches that arrive together (the loader's workers) when this setting changes them; None: unchanged."""
        return None

    def environment(self, setting: dict[str, Any]) -> dict[str, str]:
        """Variables to set before the child starts (read once, when torch starts); applied in the child's env."""
        return {}

    def apply(self, setting: dict[str, Any], changes: ChangeSet) -> None:
        raise NotImplementedError(f"{self.id} is a recommendation, not applied automatically")

    def keyword_edits(self, setting: dict[str, Any]) -> dict[str, str]:
        """Keyword arguments (as source text) to set on the construction call at `site`, for the diff."""
        return {}

    def snippet(self, setting: dict[str, Any], ctx: Context) -> str:
        return ""


class LoaderOptimization(Optimization):
    """Changes the DataLoader that drives training (the diff edits its construction): not tried without one."""
    site = "loader"
    no_loader_reason = "the script builds no DataLoader"

    def skip_reason(self, ctx: Context) -> Optional[str]:
        return self.no_loader_reason if ctx.loader is None else self.loader_skip_reason(ctx)

    def loader_skip_reason(self, ctx: Context) -> Optional[str]:
        """Why not, once there is a loader (None: it can be tried)."""
        return None


class ModelOptimization(Optimization):
    """Changes the model the script calls: not tried when no nn.Module forward was seen."""

    def skip_reason(self, ctx: Context) -> Optional[str]:
        if ctx.capture.model is None:
            return "no model call was seen (no nn.Module forward)"
        return self.model_skip_reason(ctx)

    def model_skip_reason(self, ctx: Context) -> Optional[str]:
        """Why not, once there is a model (None: it can be tried)."""
        return None
