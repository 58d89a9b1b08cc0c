"""Measurements taken in the child after the profiled window: dataset determinism and cost, peak RSS."""
from __future__ import annotations

import contextlib
import inspect
import itertools
import random
import resource
import time
from typing import Any, Optional

import torch

from diagnose.model import DatasetProbe

PROBE_BUDGET_S = 3.0
STREAM_ITEMS = 3  # items read from a stream per pass (four passes)
PROBE_SEED = 1234


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
    if isinstance(dataset, torch.utils.data.IterableDataset):
        return probe_stream(dataset)
    if not hasattr(dataset, "__getitem__"):
        return DatasetProbe(None, None, None, "the dataset has no __getitem__: items cannot be fetched by index")
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


def probe_stream(dataset: Any) -> DatasetProbe:
    """An IterableDataset, read a few items at a time: does a pass repeat with the same seeds, does it depend on
    the seeds, how long does an item take, and do two DataLoader workers get different parts of the stream? Each
    worker runs its own copy of `__iter__`, seeded as the DataLoader seeds it (base seed + worker id); unless that
    copy looks at get_worker_info() (or a library does it: HF datasets shards, WebDataset split_by_worker), every
    worker replays the whole stream. Workers are imitated here, in this process."""
    try:
        with _seeded(PROBE_SEED):
            walls, cpus, first = _timed_take(dataset, STREAM_ITEMS)
        with _seeded(PROBE_SEED):
            again = _take(dataset, STREAM_ITEMS)
        with _seeded(PROBE_SEED + 1):
            reseeded = _take(dataset, STREAM_ITEMS)
        workers = []
        for worker_id in (0, 1):
            with _seeded(PROBE_SEED + worker_id), _as_worker(worker_id, 2, PROBE_SEED + worker_id, dataset):
                workers.append(_take(dataset, STREAM_ITEMS))
    except Exception as exc:
        return DatasetProbe(None, None, None, f"reading the stream failed: {type(exc).__name__}: {exc}",
                            stream_note=f"whether workers split the stream is unknown: reading it failed ({exc})")
    if not first:
        return DatasetProbe(None, None, None, "the stream gave no item", stream_note="the stream gave no item")
    # items that change with the seed are random: in a run, dropout's draws interleave with the stream's
    deterministic = same(first, again) and same(first, reseeded)
    sharded, note = _sharding(deterministic, *workers, dataset)
    wall = sum(walls)
    return DatasetProbe(deterministic=deterministic, item_s=wall / len(walls),
                        item_cpu_frac=min(1.0, sum(cpus) / wall) if wall > 0 else None,
                        reason="" if deterministic else "the stream's items change with the random seed or per pass",
                        item_bytes=max(tensor_bytes(x) for x in first), stream_sharded=sharded, stream_note=note)


def _sharding(deterministic: bool, worker0: list, worker1: list, dataset: Any) -> tuple[Optional[bool], str]:
    if worker0 and same(worker0, worker1):
        return False, ("two workers read the same first items: each DataLoader worker replays the whole stream, "
                       "so N workers feed every sample N times")
    if deterministic:
        return True, "two workers read different items: the stream is split across workers"
    if _calls_worker_info(dataset):
        return True, "its __iter__ calls get_worker_info() (items are random, so this was read from the code)"
    return None, "items change with the seed (random?): whether workers split the stream could not be told"


def _calls_worker_info(dataset: Any) -> bool:
    try:
        return "get_worker_info" in inspect.getsource(type(dataset).__iter__)
    except (OSError, TypeError):
        return False


def _take(dataset: Any, n: int) -> list:
    return list(itertools.islice(iter(dataset), n))


def _timed_take(dataset: Any, n: int) -> tuple[list[float], list[float], list]:
    """Items with the wall and CPU time of each but the first (which pays for opening the stream)."""
    walls, cpus, items = [], [], []
    stream = iter(dataset)
    start = time.perf_counter()
    for index in range(n + 1):
        w0, c0 = time.perf_counter(), time.thread_time()
        try:
            items.append(next(stream))
        except StopIteration:
            break
        if index:
            walls.append(time.perf_counter() - w0)
            cpus.append(time.thread_time() - c0)
        if time.perf_counter() - start > PROBE_BUDGET_S:
            break
    return walls or [time.perf_counter() - start], cpus or [0.0], items[:n]


@contextlib.contextmanager
def _seeded(seed: int):
    """Seeds for one pass (torch, random, numpy), restored afterwards."""
    torch_state, py_state = torch.random.get_rng_state(), random.getstate()
    numpy = _numpy()
    np_state = numpy.random.get_state() if numpy else None
    torch.manual_seed(seed)
    random.seed(seed)
    if numpy:
        numpy.random.seed(seed)
    try:
        yield
    finally:
        torch.random.set_rng_state(torch_state)
        random.setstate(py_state)
        if numpy:
            numpy.random.set_state(np_state)


@contextlib.contextmanager
def _as_worker(worker_id: int, workers: int, seed: int, dataset: Any):
    """get_worker_info() answers as in DataLoader worker `worker_id` of `workers` while the stream is read."""
    from torch.utils.data._utils import worker

    saved = worker._worker_info
    worker._worker_info = worker.WorkerInfo(id=worker_id, num_workers=workers, seed=seed, dataset=dataset)
    try:
        yield
    finally:
        worker._worker_info = saved


def _numpy():
    try:
        import numpy

        return numpy
    except ImportError:
        return None


def peak_rss_bytes() -> Optional[int]:
    try:
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # KiB on Linux
    except Exception:
        return None
