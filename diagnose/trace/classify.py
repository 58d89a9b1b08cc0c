"""Sort a trace event into the kind of span the analysis needs, from its category and name.

Handles old (`Operator`, `Kernel`, `Runtime`, `Memcpy`) and new (`cpu_op`, `kernel`, `cuda_runtime`,
`gpu_memcpy`) categories, DataLoader spans as `user_annotation` or as ops, and rows without `cat`.
"""
from __future__ import annotations

import math
from typing import Iterable, Iterator, Optional

import orjson

CPU_OP = {"cpu_op", "operator"}
KERNEL = {"kernel"}
MEMCPY = {"gpu_memcpy", "memcpy"}
MEMSET = {"gpu_memset", "memset"}
RUNTIME = {"cuda_runtime", "runtime", "cuda_driver", "hip_runtime"}
ANNOTATION = {"user_annotation", "gpu_user_annotation"}
PYTHON = {"python_function"}
COMM_MARKERS = ("nccl", "rccl", "gloo", "c10d::", "allreduce", "all_reduce", "allgather", "all_gather",
                "reduce_scatter", "record_param_comms")  # not "broadcast": aten::broadcast_tensors is local
SYNC_RUNTIME = ("cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize", "hipStreamSynchronize",
                "hipDeviceSynchronize", "hipEventSynchronize")
# what event_kind returns (in this order: the fast parser codes kinds by their place here)
KINDS = ("step", "dataloader", "cpu", "annotation", "kernel", "memcpy", "memset", "runtime", "python")


def empty_buckets() -> dict[str, list]:
    return {k: [] for k in KINDS}


def is_communication(name: str) -> bool:
    lowered = name.lower()
    return any(marker in lowered for marker in COMM_MARKERS)


def _is_step(name: str) -> bool:
    return name.startswith("ProfilerStep#")


def _is_dataloader(name: str) -> bool:
    return name.startswith("enumerate(DataLoader)")


def event_kind(e: dict) -> Optional[str]:
    """One of KINDS, or None for an event the analysis does not use."""
    name = e.get("name", "")
    name = name if isinstance(name, str) else str(name)
    cat = str(e.get("cat", "")).lower()
    if _is_step(name):
        return "step"
    if _is_dataloader(name):
        return "dataloader"
    if cat in CPU_OP or (not cat and name.startswith(("aten::", "c10d::"))):
        return "cpu"
    if cat in KERNEL:
        return "kernel"
    if cat in MEMCPY:
        return "memcpy"
    if cat in MEMSET:
        return "memset"
    if cat in RUNTIME:
        return "runtime"
    if cat in PYTHON:
        return "python"
    if cat in ANNOTATION:
        return "annotation"
    return None


def thread_value(value):
    """A pid or tid as it can key a table: a list or an object (no profiler writes one) as its JSON text."""
    return value if value is None or isinstance(value, (str, int, float)) else orjson.dumps(value).decode()


def thread_of_text(raw: bytes):
    """A pid or tid as the expressions read it, its JSON text: a string's text, else a number."""
    return raw[1:-1].decode() if raw[:1] == b'"' else int(raw)


def correlation_id(event: dict) -> int:
    """The id in a parsed event's args that links a launch to its device work: an int from 0 up to int64's
    largest, else -1 (it links nothing), as the expressions read it from the text (digits that fit)."""
    args = event.get("args")
    value = args.get("correlation") if isinstance(args, dict) else None
    usable = isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 1 << 63
    return value if usable else -1


def finite_number(value) -> bool:
    """Whether a parsed JSON value is a usable time: a finite int or float (not a bool, a string or null)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def complete_events(events: Iterable) -> Iterator[tuple[dict, float, float]]:
    """(event, start, duration) of each complete event among parsed objects whose start and duration are usable
    times (the values as parsed: an int stays an int)."""
    for event in events:
        if isinstance(event, dict) and event.get("ph") == "X":
            start, duration = event.get("ts"), event.get("dur")
            if finite_number(start) and finite_number(duration):
                yield event, start, duration
