"""Load a Kineto (torch.profiler) Chrome trace and sort its events into the kinds the analysis needs.

Handles old (`Operator`, `Kernel`, `Runtime`, `Memcpy`) and new (`cpu_op`, `kernel`, `cuda_runtime`,
`gpu_memcpy`) categories, DataLoader spans as `user_annotation` or as ops, and rows without `cat`.
"""
from __future__ import annotations

import gzip
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

import numpy as np
import orjson

from diagnose.errors import UserError

CPU_OP = {"cpu_op", "operator"}
KERNEL = {"kernel"}
MEMCPY = {"gpu_memcpy", "memcpy"}
MEMSET = {"gpu_memset", "memset"}
RUNTIME = {"cuda_runtime", "runtime", "cuda_driver", "hip_runtime"}
ANNOTATION = {"user_annotation", "gpu_user_annotation"}
PYTHON = {"python_function"}
COMM_MARKERS = ("nccl", "rccl", "gloo", "c10d::", "allreduce", "all_reduce", "allgather", "all_gather",
                "reduce_scatter", "broadcast_", "record_param_comms")
SYNC_RUNTIME = ("cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize", "hipStreamSynchronize",
                "hipDeviceSynchronize", "hipEventSynchronize")


@dataclass
class Spans:
    """Spans of one kind: start, end (us) and names, as arrays."""
    start: np.ndarray = field(default_factory=lambda: np.zeros(0))
    end: np.ndarray = field(default_factory=lambda: np.zeros(0))
    names: list[str] = field(default_factory=list)
    tids: list = field(default_factory=list)

    @classmethod
    def of(cls, rows: list[tuple]) -> "Spans":
        if not rows:
            return cls()
        ts, dur, names, tids = zip(*rows)
        start = np.asarray(ts, dtype=np.float64)
        return cls(start, start + np.asarray(dur, dtype=np.float64), list(names), list(tids))

    def __len__(self) -> int:
        return len(self.names)

    def intervals(self, mask: Optional[np.ndarray] = None) -> np.ndarray:
        if mask is None:
            return np.column_stack([self.start, self.end])
        return np.column_stack([self.start[mask], self.end[mask]])

    def mask(self, predicate) -> np.ndarray:
        return np.fromiter((predicate(n) for n in self.names), dtype=bool, count=len(self.names))


@dataclass
class Trace:
    path: str
    metadata: dict
    steps: Spans
    dataloader: Spans
    cpu_ops: Spans  # main process only
    annotations: Spans
    kernels: Spans
    memcpy: Spans
    memset: Spans
    runtime: Spans
    python: Spans
    main_tid: object
    step_definition: str

    @property
    def has_gpu(self) -> bool:
        return len(self.kernels) + len(self.memcpy) + len(self.memset) > 0


def read_events(path: Path) -> dict:
    try:
        raw = path.read_bytes()
        if raw[:2] == b"\x1f\x8b":
            raw = gzip.decompress(raw)
        data = orjson.loads(raw)
    except (OSError, EOFError, gzip.BadGzipFile, orjson.JSONDecodeError) as exc:
        raise UserError(f"cannot read trace {path}: {exc}", "pass a torch.profiler trace (.json or .json.gz)")
    if isinstance(data, list):  # a bare event list is also valid Chrome-trace JSON
        data = {"traceEvents": data}
    if not isinstance(data, dict) or not isinstance(data.get("traceEvents"), list):
        raise UserError(f"{path} is not a Chrome trace: no traceEvents list", "pass a torch.profiler trace")
    return data


def _is_step(name: str) -> bool:
    return name.startswith("ProfilerStep#")


def _is_dataloader(name: str) -> bool:
    return name.startswith("enumerate(DataLoader)")


def is_communication(name: str) -> bool:
    lowered = name.lower()
    return any(marker in lowered for marker in COMM_MARKERS)


def load_trace(path: Path) -> Trace:
    data = read_events(path)
    buckets: dict[str, list] = {k: [] for k in ("step", "dl", "cpu", "ann", "kernel", "memcpy", "memset", "rt", "py")}
    for e in data["traceEvents"]:
        if e.get("ph") != "X" or "dur" not in e:
            continue
        kind = _kind(e)
        if kind is not None:
            buckets[kind].append((e.get("ts", 0.0), e["dur"], e.get("name", ""), (e.get("pid"), e.get("tid"))))
    metadata = {k: v for k, v in data.items() if k != "traceEvents"}
    return _assemble(str(path), metadata, buckets)


def _kind(e: dict) -> Optional[str]:
    name = e.get("name", "")
    cat = str(e.get("cat", "")).lower()
    if _is_step(name):
        return "step"
    if _is_dataloader(name):
        return "dl"
    if cat in CPU_OP or (not cat and name.startswith(("aten::", "c10d::"))):
        return "cpu"
    if cat in KERNEL:
        return "kernel"
    if cat in MEMCPY:
        return "memcpy"
    if cat in MEMSET:
        return "memset"
    if cat in RUNTIME:
        return "rt"
    if cat in PYTHON:
        return "py"
    if cat in ANNOTATION:
        return "ann"
    return None


def _assemble(path: str, metadata: dict, b: dict[str, list]) -> Trace:
    steps = b["step"]
    if steps:
        main = max(((r[3], sum(1 for s in steps if s[3] == r[3])) for r in steps), key=lambda x: x[1])[0]
        definition = "ProfilerStep markers"
    else:
        main = _busiest_thread(b["cpu"] + b["dl"])
        definition = "no ProfilerStep markers: the whole trace is one step"
    main_pid = main[0] if main else None
    on_main_pid = lambda rows: [r for r in rows if main_pid is None or r[3][0] == main_pid]  # noqa: E731
    step_rows = sorted((r for r in steps if r[3] == main), key=lambda r: r[0])
    if not step_rows:
        step_rows = _whole_trace_step(b)
    return Trace(
        path=path, metadata=metadata,
        steps=Spans.of(step_rows),
        dataloader=Spans.of(sorted((r for r in b["dl"] if r[3] == main or not steps), key=lambda r: r[0])),
        cpu_ops=Spans.of(on_main_pid(b["cpu"])),
        annotations=Spans.of(on_main_pid(b["ann"])),
        kernels=Spans.of(b["kernel"]), memcpy=Spans.of(b["memcpy"]), memset=Spans.of(b["memset"]),
        runtime=Spans.of(on_main_pid(b["rt"])), python=Spans.of(on_main_pid(b["py"])),
        main_tid=main, step_definition=definition,
    )


def _busiest_thread(rows: list) -> Optional[tuple]:
    totals: dict = {}
    for r in rows:
        totals[r[3]] = totals.get(r[3], 0.0) + r[1]
    return max(totals, key=totals.get) if totals else None


def _whole_trace_step(b: dict[str, list]) -> list:
    rows = [r for kind in ("cpu", "dl", "kernel", "memcpy", "memset", "rt") for r in b[kind]]
    if not rows:
        return []
    start = min(r[0] for r in rows)
    end = max(r[0] + r[1] for r in rows)
    return [(start, end - start, "whole trace", None)]
