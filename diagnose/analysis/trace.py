"""Load a Kineto (torch.profiler) Chrome trace and sort its events into the kinds the analysis needs.

Handles old (`Operator`, `Kernel`, `Runtime`, `Memcpy`) and new (`cpu_op`, `kernel`, `cuda_runtime`,
`gpu_memcpy`) categories, DataLoader spans as `user_annotation` or as ops, and rows without `cat`.
"""
from __future__ import annotations

import gzip
import math
import os
import pickle
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

import numpy as np
import orjson

from diagnose import prefetch
from diagnose.errors import UserError

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


@dataclass
class Spans:
    """Spans of one kind: start, end (us) and names, as arrays."""
    start: np.ndarray = field(default_factory=lambda: np.zeros(0))
    end: np.ndarray = field(default_factory=lambda: np.zeros(0))
    names: list[str] = field(default_factory=list)
    tids: list = field(default_factory=list)
    corr: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))  # CUDA correlation id, -1: none
    _codes: Optional[np.ndarray] = field(default=None, repr=False, compare=False)
    _uniques: list[str] = field(default_factory=list, repr=False, compare=False)

    @classmethod
    def of(cls, rows: list[tuple]) -> "Spans":
        if not rows:
            return cls()
        ts, dur, names, tids, *corr = zip(*rows)  # (ts, dur, name, tid[, correlation])
        start = np.asarray(ts, dtype=np.float64)
        return cls(start, start + np.asarray(dur, dtype=np.float64), list(names), list(tids),
                   np.asarray(corr[0] if corr else [-1] * len(names), dtype=np.int64))

    def __len__(self) -> int:
        return len(self.names)

    def intervals(self, mask: Optional[np.ndarray] = None) -> np.ndarray:
        if mask is None:
            return np.column_stack([self.start, self.end])
        return np.column_stack([self.start[mask], self.end[mask]])

    def mask(self, predicate) -> np.ndarray:
        """predicate(name) for every span, evaluated once per distinct name (names repeat a lot)."""
        codes, uniques = self.factorized()
        return np.fromiter((predicate(n) for n in uniques), dtype=bool, count=len(uniques))[codes]

    def take(self, index: np.ndarray) -> "Spans":
        picks = index.tolist()
        return Spans(self.start[index], self.end[index], [self.names[i] for i in picks], [self.tids[i] for i in picks],
                     self.correlations()[index])

    def correlations(self) -> np.ndarray:
        """Correlation ids (launch -> device work), -1 where an event has none."""
        if len(self.corr) != len(self.names):
            self.corr = np.full(len(self.names), -1, dtype=np.int64)
        return self.corr

    def where_thread(self, predicate) -> "Spans":
        """The spans whose (pid, tid) satisfies predicate, evaluated once per distinct thread."""
        index: dict = {}
        codes = np.fromiter((index.setdefault(t, len(index)) for t in self.tids), dtype=np.int64, count=len(self.tids))
        keep = np.fromiter((bool(predicate(t)) for t in index), dtype=bool, count=len(index))
        return self.take(np.flatnonzero(keep[codes])) if len(self) else self

    def sorted(self) -> "Spans":
        return self.take(np.argsort(self.start, kind="stable"))

    @classmethod
    def concat(cls, parts: list["Spans"]) -> "Spans":
        parts = [p for p in parts if len(p)]
        if not parts:
            return cls()
        return cls(np.concatenate([p.start for p in parts]), np.concatenate([p.end for p in parts]),
                   [n for p in parts for n in p.names], [t for p in parts for t in p.tids],
                   np.concatenate([p.correlations() for p in parts]))

    def factorized(self) -> tuple[np.ndarray, list[str]]:
        if self._codes is None:
            index: dict[str, int] = {}
            codes = np.fromiter((index.setdefault(n, len(index)) for n in self.names), dtype=np.int64,
                                count=len(self.names))
            self._codes, self._uniques = codes, list(index)
        return self._codes, self._uniques


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


def read_bytes(path: Path) -> bytes:
    prefetched = prefetch.take(path)
    if prefetched is not None:
        return prefetched
    try:
        raw = path.read_bytes()
        return gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw
    except (OSError, EOFError, gzip.BadGzipFile) as exc:
        raise UserError(f"cannot read trace {path}: {exc}", "pass a torch.profiler trace (.json or .json.gz)")


def read_events(path: Path, raw: Optional[bytes] = None) -> dict:
    try:
        data = orjson.loads(read_bytes(path) if raw is None else raw)
    except orjson.JSONDecodeError as exc:
        cut = "end of data" in str(exc) or "EOF" in str(exc)
        raise UserError(f"cannot read trace {path}: {exc}" + (" (the file looks cut short)" if cut else ""),
                        "copy the whole file again" if cut else "pass a torch.profiler trace (.json or .json.gz)")
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
    """Kineto writes every complete event with its keys in one order ("ph", "cat", "name", "pid", "tid", "ts",
    "dur"): those are read straight from the bytes, without building a dict per event (most of a big trace's
    parsing time and memory). Any other layout, or any doubt, goes through the full JSON parser."""
    raw = read_bytes(path)
    fast = fast_rows(raw)
    if fast is not None:
        metadata, buckets = fast
        return _assemble(str(path), metadata, buckets)
    data = read_events(path, raw)
    rows = _empty_buckets()
    for e in data["traceEvents"]:
        if not isinstance(e, dict) or e.get("ph") != "X" or not _finite(e.get("dur")) or not _finite(e.get("ts", 0.0)):
            continue  # not an event, or a complete event without a usable time: nothing to place on a timeline
        kind = _kind(e)
        if kind is not None:
            name = e.get("name", "")
            rows[kind].append((e.get("ts", 0.0), e["dur"], name if isinstance(name, str) else str(name),
                               (e.get("pid"), e.get("tid")), _correlation(e)))
    metadata = {k: v for k, v in data.items() if k != "traceEvents"}
    return _assemble(str(path), metadata, {kind: Spans.of(r) for kind, r in rows.items()})


def _finite(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _correlation(e: dict) -> int:
    args = e.get("args")
    value = args.get("correlation") if isinstance(args, dict) else None
    return value if isinstance(value, int) and not isinstance(value, bool) else -1


def _empty_buckets() -> dict[str, list]:
    return {k: [] for k in ("step", "dl", "cpu", "ann", "kernel", "memcpy", "memset", "rt", "py")}


_NUMBER = rb"(-?\d+(?:\.\d*)?(?:[eE][-+]?\d+)?)"
_ID = rb'(-?\d+|"[^"\\]*")'
_STRING = rb'"([^"\\]*(?:\\.[^"\\]*)*)"'  # unrolled: much faster than (?:[^"\\]|\\.)*
FAST_EVENT = re.compile(rb'"ph":\s*"X",\s*"cat":\s*"([^"\\]*)",\s*"name":\s*' + _STRING + rb',\s*"pid":\s*' + _ID
                        + rb',\s*"tid":\s*' + _ID + rb',\s*"ts":\s*' + _NUMBER + rb',\s*"dur":\s*' + _NUMBER
                        # the correlation id that links a launch to its device work: after the args' leading scalar
                        # members (Kineto writes it before any list); never read from another event's args
                        + rb'(?:,\s*"args":\s*\{\s*(?:"[^"\\]*":\s*(?:[^,{}"\[\]\s][^,{}"\[\]]*|"[^"\\]*"),\s*)*?'
                        + rb'"correlation":\s*(\d+))?')
EVENTS_KEY = re.compile(rb'"traceEvents"\s*:\s*\[')
CHUNK_BYTES = 8 << 20


def fast_rows(raw: bytes) -> Optional[tuple[dict, dict[str, Spans]]]:
    """(metadata, spans by kind) read with one regular expression, in chunks of the text; None when the trace
    is not laid out as Kineto writes it (every complete event must match, or the full parser is used).
    A big trace's second half of chunks is read by a forked process meanwhile (re holds the GIL)."""
    key = EVENTS_KEY.search(raw)
    if key is None:
        return None
    metadata = _head_metadata(raw[:key.start()])
    if metadata is None:
        return None
    tail = _tail_metadata(raw[max(key.end(), len(raw) - 65536):])
    if not tail and not CLOSED.search(raw[-256:]):
        return None  # the text does not end as a whole trace does: cut short? the full parser will say
    metadata.update(tail)
    pretty = raw.find(b'"ph": "X"', key.end()) >= 0
    if pretty and raw.find(b'"ph":"X"', key.end()) >= 0:
        return None  # both layouts in one file: not Kineto's writer
    chunks = _chunks(raw, key.end())
    half = len(chunks) // 2
    other = _forked(lambda: _read_chunks(raw, chunks[half:], pretty)) if half and _cores() > 1 else None
    mine = _read_chunks(raw, chunks[:half] if other else chunks, pretty)
    theirs = other() if other else None
    if other is not None and theirs is None:  # the helper process failed: read its chunks here
        theirs = _read_chunks(raw, chunks[half:], pretty)
    results = [mine] + ([theirs] if theirs else [])
    matched, complete = sum(r[1] for r in results), sum(r[2] for r in results)
    if matched != complete:
        return None
    return metadata, {kind: Spans.concat([p for r in results for p in r[0][kind]]) for kind in _empty_buckets()}


def _chunks(raw: bytes, start: int) -> list[tuple[int, int]]:
    """About CHUNK_BYTES each, cut where an event's "ph" begins."""
    bounds = []
    while start < len(raw):
        end = raw.find(b'"ph"', start + CHUNK_BYTES)
        end = len(raw) if end < 0 else end
        bounds.append((start, end))
        start = end
    return bounds


def _read_chunks(raw: bytes, chunks: list[tuple[int, int]], pretty: bool) -> tuple[dict[str, list[Spans]], int, int]:
    """(spans by kind, complete events matched, complete events there are) for these chunks."""
    parts: dict[str, list[Spans]] = {k: [] for k in _empty_buckets()}
    names: dict[bytes, str] = {}
    threads: dict[tuple, tuple] = {}
    kinds: dict[tuple, Optional[str]] = {}
    complete_mark = b'"ph": "X"' if pretty else b'"ph":"X"'
    profiler_span = b'"ph": "X", "cat": "Trace"' if pretty else b'"ph":"X","cat":"Trace"'
    matched = complete = 0
    for start, end in chunks:
        # Kineto writes '"ph": "X"' (pretty) or '"ph":"X"' (compact); other spacing fails the count: full parser.
        # The profiler's own span ("Trace") has its keys in another order and is not needed.
        complete += raw.count(complete_mark, start, end) - raw.count(profiler_span, start, end)
        found = FAST_EVENT.findall(raw, start, end)
        if not found:
            continue
        cats, raw_names, pids, tids, ts, durs, corrs = zip(*found)
        matched += len(found) - cats.count(b"Trace")
        texts = [names[n] if n in names else _decoded(names, n) for n in raw_names]
        kind_of = [kinds[k] if k in kinds else _kind_into(kinds, k) for k in zip(cats, texts)]
        ids = [threads[t] if t in threads else _thread_into(threads, t) for t in zip(pids, tids)]
        begin = np.fromiter(map(float, ts), dtype=np.float64, count=len(ts))
        finish = begin + np.fromiter(map(float, durs), dtype=np.float64, count=len(durs))
        links = np.fromiter((int(c) if c else -1 for c in corrs), dtype=np.int64, count=len(corrs))
        groups: dict[str, list[int]] = {}
        for i, kind in enumerate(kind_of):
            if kind is not None:
                groups.setdefault(kind, []).append(i)
        for kind, picks in groups.items():
            index = np.asarray(picks)
            parts[kind].append(Spans(begin[index], finish[index], [texts[i] for i in picks], [ids[i] for i in picks],
                                     links[index]))
    return parts, matched, complete


def _cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def _forked(work):
    """Run work() in a forked copy of this process; returns a function that waits for its (picklable) result,
    or None when forking is not possible here. The result is None if the child failed."""
    if not hasattr(os, "fork"):
        return None
    read_end, write_end = os.pipe()
    try:
        pid = os.fork()
    except OSError:
        os.close(read_end)
        os.close(write_end)
        return None
    if pid == 0:  # the child: compute, send, leave without running any of the parent's cleanup
        code = 1
        try:
            os.close(read_end)
            with os.fdopen(write_end, "wb") as pipe:
                pipe.write(pickle.dumps(work(), protocol=pickle.HIGHEST_PROTOCOL))
            code = 0
        finally:
            os._exit(code)
    os.close(write_end)

    def result():
        with os.fdopen(read_end, "rb") as pipe:
            data = pipe.read()
        _, status = os.waitpid(pid, 0)
        return pickle.loads(data) if status == 0 and data else None

    return result


def _decoded(cache: dict, name: bytes) -> str:
    cache[name] = text = orjson.loads(b'"' + name + b'"') if b"\\" in name else name.decode()
    return text


def _kind_into(cache: dict, key: tuple) -> Optional[str]:
    cache[key] = kind = _kind({"cat": key[0].decode(), "name": key[1]})
    return kind


def _thread_into(cache: dict, key: tuple) -> tuple:
    cache[key] = thread = (_id(key[0]), _id(key[1]))
    return thread


def _id(raw: bytes):
    return raw[1:-1].decode() if raw[:1] == b'"' else int(raw)


TAIL_KEY = re.compile(rb'\]\s*,\s*(?="[^"\\]+"\s*:)')
CLOSED = re.compile(rb"\]\s*\}\s*$")


def _tail_metadata(tail: bytes) -> dict:
    """The keys after traceEvents (traceName, baseTimeNanoseconds...): the first place after a `]` from which
    the rest of the text parses as an object's members."""
    for match in TAIL_KEY.finditer(tail):
        try:
            value = orjson.loads(b"{" + tail[match.end():])
        except orjson.JSONDecodeError:
            continue
        if isinstance(value, dict):
            return value
    return {}


def _head_metadata(head: bytes) -> Optional[dict]:
    """The keys before traceEvents (deviceProperties, distributedInfo...), parsed as an object of their own."""
    text = head.strip()
    if not text.startswith(b"{"):
        return None
    text = text.rstrip(b",") if text.endswith(b",") else text
    try:
        value = orjson.loads(text + b"}")
    except orjson.JSONDecodeError:
        return None
    return value if isinstance(value, dict) else None


def _kind(e: dict) -> Optional[str]:
    name = e.get("name", "")
    name = name if isinstance(name, str) else str(name)
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


def _assemble(path: str, metadata: dict, b: dict[str, Spans]) -> Trace:
    if not any(len(spans) for spans in b.values()):
        raise UserError(f"{path} holds no profiler events with a start and a duration to analyse",
                        "pass a trace written by torch.profiler (export_chrome_trace or tensorboard_trace_handler)")
    steps = b["step"]
    if len(steps):
        main = Counter(steps.tids).most_common(1)[0][0]
        definition = "ProfilerStep markers"
    else:
        main = _busiest_thread(Spans.concat([b["cpu"], b["dl"]]))
        definition = "no ProfilerStep markers: the whole trace is one step"
    main_pid = main[0] if main else None

    def on_main_pid(spans: Spans) -> Spans:
        return spans if main_pid is None else spans.where_thread(lambda t: t[0] == main_pid)

    step_spans = steps.where_thread(lambda t: t == main).sorted() if len(steps) else _whole_trace_step(b)
    loader = b["dl"].where_thread(lambda t: t == main) if len(steps) else b["dl"]
    return Trace(
        path=path, metadata=metadata,
        steps=step_spans,
        dataloader=loader.sorted(),
        cpu_ops=on_main_pid(b["cpu"]),
        annotations=on_main_pid(b["ann"]),
        kernels=b["kernel"], memcpy=b["memcpy"], memset=b["memset"],
        runtime=on_main_pid(b["rt"]), python=on_main_pid(b["py"]),
        main_tid=main, step_definition=definition,
    )


def _busiest_thread(spans: Spans) -> Optional[tuple]:
    totals: dict = {}
    for tid, duration in zip(spans.tids, (spans.end - spans.start).tolist()):
        totals[tid] = totals.get(tid, 0.0) + duration
    return max(totals, key=totals.get) if totals else None


def _whole_trace_step(b: dict[str, Spans]) -> Spans:
    every = [b[kind] for kind in ("cpu", "dl", "kernel", "memcpy", "memset", "rt") if len(b[kind])]
    if not every:
        return Spans()
    start = min(float(s.start.min()) for s in every)
    end = max(float(s.end.max()) for s in every)
    return Spans(np.array([start]), np.array([end]), ["whole trace"], [None], np.array([-1], dtype=np.int64))
