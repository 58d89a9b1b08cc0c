"""Measurements taken in the child after the profiled window: dataset determinism and cost, peak RSS."""
from __future__ import annotations

import resource
import time
from typing import Any, Optional

import torch

from diagnose.model import DatasetProbe

PROBE_BUDGET_S = 3.0


def same(a: Any, b: Any) -> bool:
    """Deep equality for what datasets return: tensors, arrays, numbers, strings and containers of them."""
    if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
        return a.shape == b.shape and a.dtype == b.dtype and bool(torch.equal(a, b))
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if hasattr(a, "shape") and hasattr(a, "dtype"):  # numpy arrays
        try:
            import numpy as np

            return bool(np.array_equal(a, b))
        except Exception:
            return False
    try:
        return bool(a == b)
    except Exception:
        return False


def tensor_bytes(item: Any) -> int:
    if isinstance(item, torch.Tensor):
        return item.numel() * item.element_size()
    if isinstance(item, (list, tuple)):
        return sum(tensor_bytes(x) for x in item)
    if isinstance(item, dict):
        return sum(tensor_bytes(x) for x in item.values())
    return int(getattr(item, "nbytes", 0) or 0)


def probe_dataset(dataset: Any) -> DatasetProbe:
    """Fetch a few items twice: is __getitem__ deterministic, how long does it take, how much is CPU."""
    if not hasattr(dataset, "__getitem__") or isinstance(dataset, torch.utils.data.IterableDataset):
        return DatasetProbe(None, None, None, "iterable dataset: items cannot be fetched by index")
    try:
        n = len(dataset)
    except Exception:
        return DatasetProbe(None, None, None, "dataset has no len()")
    if n == 0:
        return DatasetProbe(None, None, None, "dataset is empty")
    try:
        return _probe(dataset, n)
    except Exception as exc:
        return DatasetProbe(None, None, None, f"fetching an item failed: {type(exc).__name__}: {exc}")


def _probe(dataset: Any, n: int) -> DatasetProbe:
    walls, cpus, deterministic, size = [], [], True, 0
    start = time.perf_counter()
    for index in dict.fromkeys([0, n // 2, n - 1]):
        w0, c0 = time.perf_counter(), time.thread_time()
        first = dataset[index]
        size = max(size, tensor_bytes(first))
        walls.append(time.perf_counter() - w0)
        cpus.append(time.thread_time() - c0)
        deterministic = deterministic and same(first, dataset[index])
        if time.perf_counter() - start > PROBE_BUDGET_S:
            break
    wall = sum(walls)
    return DatasetProbe(
        deterministic=deterministic,
        item_s=wall / len(walls),
        item_cpu_frac=min(1.0, sum(cpus) / wall) if wall > 0 else None,
        reason="" if deterministic else "the same index returned different items (random augmentation?)",
        item_bytes=size,
    )


def peak_rss_bytes() -> Optional[int]:
    try:
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # KiB on Linux
    except Exception:
        return None
