"""DistributedDataParallel's and FSDP2's metrics: their settings and what DDP's backward passes did (from the
capture), and from the trace the all-reduces and all-gathers per optimizer step and the time DDP spends finding
unused parameters."""
from __future__ import annotations

from typing import Optional

import numpy as np

from diagnose.model import DDP_FIND_UNUSED_SPAN, Capture
from diagnose.trace import Trace
from diagnose.trace import intervals as iv

# the host-side op of one all-reduce call (one DDP bucket, or the script's own dist.all_reduce): gloo and NCCL alike
ALLREDUCE_OPS = ("c10d::allreduce_", "c10d::allreduce_coalesced_")
ALLGATHER_OPS = ("c10d::_allgather_base_", "c10d::allgather_", "c10d::allgather_into_tensor_coalesced_")
SEARCH_UNUSED_OP = "torch.distributed.ddp.reducer::search_unused_parameters"


def trace_metrics(trace: Trace, steady: Trace, within: np.ndarray, total_us: float, n: int) -> dict:
    """`steady`: the host events that start inside the measured steps (n of them, total_us long in all)."""
    allreduces = int(np.count_nonzero(steady.cpu_ops.mask(lambda name: name in ALLREDUCE_OPS)))
    allgathers = int(np.count_nonzero(steady.cpu_ops.mask(lambda name: name in ALLGATHER_OPS)))
    searching = np.vstack([trace.annotations.intervals(trace.annotations.mask(lambda x: x == DDP_FIND_UNUSED_SPAN)),
                           trace.cpu_ops.intervals(trace.cpu_ops.mask(lambda x: x == SEARCH_UNUSED_OP))])
    return {
        "allreduces_per_step": allreduces / n if allreduces else None,
        "allgathers_per_step": allgathers / n if allgathers else None,
        "ddp_find_unused_frac": iv.total(iv.intersect(iv.union(searching), within)) / total_us if len(searching)
        else None,
    }


def _flag(value: Optional[bool]) -> Optional[float]:
    return None if value is None else float(bool(value))


def capture_metrics(capture: Capture) -> dict:
    return {**_ddp_metrics(capture), **_fsdp_metrics(capture)}


def _fsdp_metrics(capture: Capture) -> dict:
    fsdp = capture.fsdp
    if fsdp is None:
        return {"fsdp_used": 0.0}
    last = len(fsdp.reshard_after_forward) - 1
    # None is torch's default: True for the units inside, False for the root (fully_shard'ed last)
    resharding = sum(1 for i, value in enumerate(fsdp.reshard_after_forward)
                     if value not in ("False", "0") and not (value == "None" and i == last))
    return {"fsdp_used": 1.0, "fsdp_units": float(fsdp.units), "fsdp_resharding_units": float(resharding),
            **({} if capture.ddp is not None or fsdp.world_size is None else {"world_size": float(fsdp.world_size)})}


def _ddp_metrics(capture: Capture) -> dict:
    ddp = capture.ddp
    if ddp is None:
        return {"ddp_used": 0.0}
    accumulating = ddp.backwards_per_step
    return {
        "ddp_used": 1.0,
        "ddp_find_unused_parameters": _flag(ddp.find_unused_parameters),
        "ddp_static_graph": _flag(ddp.static_graph),
        "ddp_gradient_as_bucket_view": _flag(ddp.gradient_as_bucket_view),
        "ddp_bucket_cap_mb": ddp.bucket_cap_mb,
        "ddp_broadcast_buffers": _flag(ddp.broadcast_buffers),
        "ddp_gradient_mb": ddp.gradient_bytes / 2**20,
        "ddp_unused_parameters": None if ddp.unused_parameters is None else float(ddp.unused_parameters),
        "ddp_backwards_per_step": None if accumulating is None else float(accumulating),
        "ddp_synced_backwards_per_step": None if ddp.synced_backwards_per_step is None
        else float(ddp.synced_backwards_per_step),
        "world_size": None if ddp.world_size is None else float(ddp.world_size),
    }
