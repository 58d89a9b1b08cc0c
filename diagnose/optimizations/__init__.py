"""Optimizations are code: one module each, registered by id in REGISTRY."""
from __future__ import annotations

from diagnose.optimizations import (  # noqa: F401  (each module registers itself)
    activation_checkpointing, amp, batch_size, channels_last, compile, cudnn_benchmark, dataloader_num_workers,
    dataloader_persistent_workers, dataloader_pin_memory, dataloader_prefetch_factor, dataset_cache, ddp,
    expandable_segments, grad_accumulation, optimizer_fused, reduce_host_work, tf32,
)
from diagnose.optimizations.registry import REGISTRY

__all__ = ["REGISTRY"]
