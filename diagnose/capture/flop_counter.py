"""One training step's FLOPs, counted by torch's own formulas (torch.utils.flop_counter.FlopCounterMode) over a
warm-up step, outside the profiled and timed windows: split by the phase the script was in (forward, backward,
optimizer) and by the dtype each op computed in. A compiled model is not counted here (a dispatch mode around
compiled code can make it recompile): the trace's shapes count it instead."""
from __future__ import annotations

import sys
from collections import Counter, defaultdict
from typing import Callable, Optional

import torch

from diagnose.model import FlopCount

SOURCE = "torch.utils.flop_counter over one warm-up step"
TOP_MODULES = 10
DTYPES = {torch.float32: "float32", torch.bfloat16: "bfloat16", torch.float16: "float16", torch.float64: "float64"}


def compiled_anything() -> bool:
    dynamo = sys.modules.get("torch._dynamo.utils")
    try:
        return bool(dynamo and dynamo.counters["stats"]["unique_graphs"])
    except Exception:
        return False


class StepFlops:
    """Counts from start() to stop(); never raises into the script (a count that fails is simply not made)."""

    def __init__(self, phase_of: Callable[[], str]):
        self.phase_of = phase_of
        self.mode = None
        self.by_phase: dict[str, float] = defaultdict(float)
        self.by_dtype: dict[str, float] = defaultdict(float)
        self.by_module: dict[str, float] = defaultdict(float)  # every module the FLOPs were spent inside
        self.failed: Counter = Counter()

    def start(self) -> str:
        """'' when counting; else why not (the note the capture keeps)."""
        from torch.utils.flop_counter import FlopCounterMode

        if compiled_anything():
            return "a compiled model: counted from the trace's shapes instead (a dispatch mode could recompile it)"
        if not hasattr(FlopCounterMode, "_count_flops"):  # torch before 2.4 counts inline: nothing to extend
            return f"torch {torch.__version__}'s FLOP counter cannot split by phase: counted from the trace's shapes"
        try:
            self.mode = _counter(self)
            self.mode.__enter__()
        except Exception as exc:
            self.mode = None
            return f"torch's FLOP counter could not start ({type(exc).__name__})"
        return ""

    def stop(self) -> Optional[FlopCount]:
        if self.mode is None:
            return None
        mode, self.mode = self.mode, None
        try:
            mode.__exit__(None, None, None)
        except Exception:
            return None
        return FlopCount(per_step=sum(self.by_phase.values()), by_phase=dict(self.by_phase),
                         by_dtype=dict(self.by_dtype), source=SOURCE,
                         uncounted=tuple(f"{name} x{n}" for name, n in self.failed.most_common()),
                         by_module=top_leaf_modules(self.by_module))

    def add(self, flops: float, args, modules) -> None:
        self.by_phase[self.phase_of()] += flops
        self.by_dtype[_dtype(args)] += flops
        for name in modules:
            self.by_module[name] += flops


def top_leaf_modules(by_module: dict[str, float], count: int = TOP_MODULES) -> dict[str, float]:
    """The innermost modules (none of their submodules did arithmetic of their own) with the most FLOPs, forward
    and backward together, in order: where the arithmetic is, by the names the model gives its layers."""
    names = [n for n in by_module if n != "Global"]
    leaves = [n for n in names if not any(other.startswith(n + ".") for other in names)]
    return dict(sorted(((n, by_module[n]) for n in leaves), key=lambda item: -item[1])[:count])


def _counter(owner: StepFlops):
    from torch.utils.flop_counter import FlopCounterMode

    class PhaseFlopCounter(FlopCounterMode):
        """FlopCounterMode that also says in which phase, and in which dtype, each op's FLOPs were spent."""

        def _count_flops(self, func_packet, out, args, kwargs):
            formula = self.flop_registry.get(func_packet)
            if formula is None:
                return out
            try:
                flops = formula(*args, **kwargs, out_val=out)
            except Exception:  # a shape the formula cannot read: listed, not counted as zero
                owner.failed[str(func_packet)] += 1
                return out
            tracker = getattr(self, "mod_tracker", None)
            owner.add(float(flops), args, set(tracker.parents) if tracker is not None else ())
            return out

    return PhaseFlopCounter(display=False)


def _dtype(args) -> str:
    first = next((a for a in args if isinstance(a, torch.Tensor) and a.is_floating_point()), None)
    return DTYPES.get(first.dtype, str(first.dtype).removeprefix("torch.")) if first is not None else "unknown"
