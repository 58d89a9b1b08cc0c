"""The ops whose FLOPs a trace's shapes give (`record_shapes=True`): matrix products, convolutions and attention,
forward and backward, with their input dims, dtypes and the scalar arguments the profiler wrote as text. Read
straight from the trace's bytes (one regular expression for the few names that matter), each event's args parsed
on its own."""
from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np
import orjson

from diagnose.analysis.fastparse import _thread_into

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

_ID = rb'(-?\d+|"[^"\\]*")'
_NUMBER = rb"(-?\d+(?:\.\d*)?(?:[eE][-+]?\d+)?)"
_NAMES = b"|".join(re.escape(n.encode()) for n in sorted(COUNTED, key=len, reverse=True))
_SEP = rb'\s*,\s*'  # the pretty-printed layout puts the comma after "dur" on a line of its own
FLOP_EVENT = re.compile(rb'"name":\s*"(' + _NAMES + rb')"' + _SEP + rb'"pid":\s*' + _ID + _SEP + rb'"tid":\s*' + _ID
                        + _SEP + rb'"ts":\s*' + _NUMBER + _SEP + rb'"dur":\s*' + _NUMBER
                        + rb'(?:' + _SEP + rb'"args":\s*(\{[^{}]*\}))?')


@dataclass
class FlopOps:
    names: tuple[str, ...] = ()
    ts: np.ndarray = field(default_factory=lambda: np.zeros(0))
    dur: np.ndarray = field(default_factory=lambda: np.zeros(0))
    tids: tuple = ()  # (pid, tid)
    dims: tuple = ()  # each op's "Input Dims" (None: the trace has no shapes)
    types: tuple = ()  # each op's "Input type"
    scalars: tuple = ()  # each op's "Concrete Inputs" (strides, paddings, masks as text)

    def __len__(self) -> int:
        return len(self.names)

    @classmethod
    def concat(cls, parts: list["FlopOps"]) -> "FlopOps":
        """Several pieces' ops, in order (a streamed trace's)."""
        parts = [p for p in parts if len(p)]
        if len(parts) <= 1:
            return parts[0] if parts else cls()
        return cls(tuple(n for p in parts for n in p.names), np.concatenate([p.ts for p in parts]),
                   np.concatenate([p.dur for p in parts]), tuple(t for p in parts for t in p.tids),
                   tuple(d for p in parts for d in p.dims), tuple(t for p in parts for t in p.types),
                   tuple(s for p in parts for s in p.scalars))


def read_flop_ops(raw: bytes) -> FlopOps:
    found = FLOP_EVENT.findall(raw)
    if not found:
        return FlopOps()
    names, threads, ts, dur, dims, types, scalars = [], [], [], [], [], [], []
    # a step's ops repeat every step: one object for each distinct name, thread and argument value
    seen: dict = {}
    known_threads: dict[tuple, tuple] = {}
    for name, pid, tid, start, length, args in found:
        parsed = _args(args)
        names.append(seen[name] if name in seen else seen.setdefault(name, name.decode()))
        thread = known_threads.get((pid, tid)) or _thread_into(known_threads, (pid, tid))
        threads.append(thread)
        ts.append(float(start))
        dur.append(float(length))
        dims.append(_shared(seen, parsed.get("Input Dims")))
        types.append(_shared(seen, parsed.get("Input type")))
        scalars.append(_shared(seen, parsed.get("Concrete Inputs")))
    return FlopOps(tuple(names), np.array(ts), np.array(dur), tuple(threads), tuple(dims), tuple(types),
                   tuple(scalars))


def _shared(seen: dict, value):
    """The one object already read for an equal value (big traces hold millions of these lists)."""
    if value is None:
        return None
    return seen.setdefault(("value", orjson.dumps(value)), value)


def _args(raw: bytes) -> dict:
    if not raw:
        return {}
    try:
        value = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return {}
    return value if isinstance(value, dict) else {}

