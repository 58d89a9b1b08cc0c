"""The ops whose FLOPs a trace's shapes give (`record_shapes=True`): matrix products, convolutions and attention,
forward and backward, with their input dims, dtypes and the scalar arguments the profiler wrote as text. Read
straight from the trace's bytes (one regular expression for the few names that matter), each event's args parsed
on its own."""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Iterable, Optional

import numpy as np
import orjson

import diagnose.trace.intervals as iv
from diagnose.trace import jitscan
from diagnose.trace.classify import complete_events, thread_value
from diagnose.trace.fastparse import _thread_into
from diagnose.trace.nesting import walk_outermost
from diagnose.trace.patterns import ID, NUMBER, SEP, compiled
from diagnose.trace.spans import CODE, merged_table, recoded

# the ops that do a step's arithmetic; their callers (linear, matmul, scaled_dot_product_attention) are not
# listed, so each product is counted once, where it is computed
GEMM = ("aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::addbmm", "aten::_addmm_activation",
        "aten::_scaled_mm")
CONVOLUTION = ("aten::convolution", "aten::convolution_backward")
ATTENTION = ("aten::_scaled_dot_product_flash_attention", "aten::_scaled_dot_product_efficient_attention",
             "aten::_scaled_dot_product_cudnn_attention", "aten::_scaled_dot_product_flash_attention_for_cpu",
             "aten::_scaled_dot_product_flash_attention_backward",
             "aten::_scaled_dot_product_efficient_attention_backward",
             "aten::_scaled_dot_product_cudnn_attention_backward",
             "aten::_scaled_dot_product_flash_attention_for_cpu_backward")
COUNTED = GEMM + CONVOLUTION + ATTENTION

_NAMES = b"|".join(re.escape(n.encode()) for n in sorted(COUNTED, key=len, reverse=True))
FLOP_EVENT = compiled(rb'"name":\s*"(' + _NAMES + rb')"' + SEP + rb'"pid":\s*' + ID + SEP + rb'"tid":\s*' + ID
                        + SEP + rb'"ts":\s*' + NUMBER + SEP + rb'"dur":\s*' + NUMBER
                        + rb'(?:' + SEP + rb'"args":\s*(\{[^{}]*\}))?')


@dataclass
class FlopOps:
    """The ops, each a kind (its name, input dims, dtypes and scalar arguments: `kinds`, one entry per distinct
    kind, as a step's ops repeat every step) and a thread (`threads`), held as int32 codes into those tables beside
    its start and duration: 24 bytes an op, no Python object per op (a 10 GB trace holds two million)."""
    ts: np.ndarray = field(default_factory=lambda: np.zeros(0))
    dur: np.ndarray = field(default_factory=lambda: np.zeros(0))
    kind_codes: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=CODE))
    kinds: list[OpKind] = field(default_factory=list)
    thread_codes: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=CODE))
    threads: list = field(default_factory=list)  # (pid, tid)

    def __len__(self) -> int:
        return len(self.ts)

    def take(self, index: np.ndarray) -> "FlopOps":
        """The ops at `index` (their codes keep indexing the same tables)."""
        return FlopOps(self.ts[index], self.dur[index], self.kind_codes[index], self.kinds, self.thread_codes[index],
                       self.threads)

    @classmethod
    def concat(cls, parts: list["FlopOps"]) -> "FlopOps":
        """Several pieces' ops, in order (a streamed trace's); equal kinds and threads get one code."""
        parts = [p for p in parts if len(p)]
        if len(parts) <= 1:
            return parts[0] if parts else cls()
        keys = [[kind.key for kind in part.kinds] for part in parts]  # kinds are told apart by their keys
        key_index, thread_index = merged_table(keys), merged_table([part.threads for part in parts])
        first_of = {}
        for part in parts:
            for kind in part.kinds:
                first_of.setdefault(kind.key, kind)
        kind_codes = [recoded(part.kind_codes, part_keys, key_index) for part, part_keys in zip(parts, keys)]
        thread_codes = [recoded(part.thread_codes, part.threads, thread_index) for part in parts]
        return cls(np.concatenate([p.ts for p in parts]), np.concatenate([p.dur for p in parts]),
                   np.concatenate(kind_codes), [first_of[key] for key in key_index], np.concatenate(thread_codes),
                   list(thread_index))


@dataclass(frozen=True, eq=False)  # its lists are not hashable: `key` tells equal kinds apart
class OpKind:
    name: str
    dims: Optional[list]  # each input's dims (None: the trace has no shapes)
    types: Optional[list]  # each input's dtype
    scalars: Optional[list]  # "Concrete Inputs": strides, paddings, masks as text
    key: tuple = field(compare=False, repr=False)  # name and the values' JSON: equal kinds, equal keys


def read_flop_ops(raw: bytes, start: int = 0, end: Optional[int] = None) -> FlopOps:
    """The FLOP ops of the text, or of raw[start:end] (whole events: cut where an event's "ph" begins)."""
    found = FLOP_EVENT.findall(raw, start, len(raw) if end is None else end)
    ops = _Collected()
    known_threads: dict[tuple, tuple] = {}
    for name, pid, tid, begin, length, args in found:
        thread = known_threads.get((pid, tid)) or _thread_into(known_threads, (pid, tid))
        ops.add(name, _args(args), thread, float(begin), float(length))
    return ops.flop_ops()


COUNTED_NAMES = frozenset(name.encode() for name in COUNTED)


def flop_ops_of_rows(raw: bytes, rows: Iterable[tuple[bytes, tuple, float, float, int]]) -> FlopOps:
    """The FLOP ops among complete events the compiled scanner read: (name's text, (pid, tid)'s texts, ts, dur,
    where its args' `{` is, -1: no args right after dur), each op's args read as the expression reads them."""
    ops = _Collected()
    known_threads: dict[tuple, tuple] = {}
    for name, pid_tid, begin, length, args_at in rows:
        thread = known_threads.get(pid_tid) or _thread_into(known_threads, pid_tid)
        ops.add(name, _args(_args_text(raw, args_at)), thread, begin, length)
    return ops.flop_ops()


def _args_text(raw: bytes, at: int) -> bytes:
    """The args object whose `{` is at `at` when it holds no object (the expression's `\\{[^{}]*\\}`), else b""."""
    if at < 0:
        return b""
    close = raw.find(b"}", at + 1)
    if close < 0 or raw.find(b"{", at + 1, close) >= 0:
        return b""
    return raw[at:close + 1]


def flop_ops_of_events(events: Iterable) -> FlopOps:
    """The FLOP ops among parsed event objects (a trace in a layout the expression does not read): complete
    events of the counted names, their args as the expression reads them."""
    ops = _Collected()
    for event, begin, length in complete_events(events):
        if event.get("name") in COUNTED:
            args = event.get("args")
            ops.add(event["name"].encode(), args if isinstance(args, dict) else {},
                    (thread_value(event.get("pid")), thread_value(event.get("tid"))), float(begin), float(length))
    return ops.flop_ops()


class _Collected:
    """Ops as they are read: each kind and thread coded once, in order of first appearance."""

    def __init__(self) -> None:
        self.ts: list[float] = []
        self.dur: list[float] = []
        self.kind_codes: list[int] = []
        self.thread_codes: list[int] = []
        self.kinds: dict[tuple, int] = {}
        self.table: list[OpKind] = []
        self.threads: dict[tuple, int] = {}

    def add(self, name: bytes, args: dict, thread: tuple, begin: float, length: float) -> None:
        values = (args.get("Input Dims"), args.get("Input type"), args.get("Concrete Inputs"))
        key = (name, *(None if v is None else orjson.dumps(v) for v in values))
        if key not in self.kinds:
            self.kinds[key] = len(self.table)
            self.table.append(OpKind(name.decode(), *values, key=key))
        self.kind_codes.append(self.kinds[key])
        self.thread_codes.append(self.threads.setdefault(thread, len(self.threads)))
        self.ts.append(begin)
        self.dur.append(length)

    def flop_ops(self) -> FlopOps:
        if not self.ts:
            return FlopOps()
        return FlopOps(np.array(self.ts), np.array(self.dur), np.array(self.kind_codes, dtype=CODE), self.table,
                       np.array(self.thread_codes, dtype=CODE), list(self.threads))


def _args(raw: bytes) -> dict:
    if not raw:
        return {}
    try:
        value = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return {}
    return value if isinstance(value, dict) else {}


def outermost_in(ops: FlopOps, host_windows: np.ndarray) -> np.ndarray:
    """The counted ops inside the steps that are not inside another counted op on the same thread, by start."""
    indices = np.flatnonzero(iv.contains(iv.union(host_windows), ops.ts))
    # by start, the longest first among equal starts (np.lexsort is stable)
    order = indices[np.lexsort((-ops.dur[indices], ops.ts[indices]))]
    kernels = jitscan.for_size(len(order))
    if kernels is not None:  # a big trace: the walk compiled, over arrays
        keep = np.empty(len(order), dtype=np.intp)
        n = kernels.walk_outermost(order.astype(np.intp, copy=False), ops.thread_codes.astype(CODE, copy=False),
                                   np.ascontiguousarray(ops.ts), np.ascontiguousarray(ops.dur),
                                   np.full(len(ops.threads), -np.inf), keep)
        return keep[:n].copy()
    keep_list = [0] * len(order)
    n = walk_outermost(order.tolist(), ops.thread_codes.tolist(), ops.ts.tolist(), ops.dur.tolist(),
                       [-math.inf] * len(ops.threads), keep_list)
    return np.asarray(keep_list[:n], dtype=np.intp)
