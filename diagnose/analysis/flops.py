"""FLOPs per step from a trace's shapes, as torch.utils.flop_counter counts them: 2 x m x k x n for each matrix
product, 2 x batch x weights x output positions for a convolution (input positions for a transposed one), and for
each gradient its backward computes; an attention forward is two products, its backward five (the scores are
recomputed). Only the outermost counted op on a thread is
counted, so an implementation that calls another counted op (a convolution done as matrix products) is counted
once. Ops that should be counted but cannot be (no shapes recorded, an argument we cannot read) are listed with
how many there were, never counted as zero."""
from __future__ import annotations

import math
import re
from typing import Optional, Sequence

import numpy as np

from diagnose.analysis.phases import point_phases
from diagnose.model import PHASES, FlopCount
from diagnose.trace import ATTENTION, GEMM, Trace, outermost_in, present_in_order

DTYPES = {"float": "float32", "c10::BFloat16": "bfloat16", "c10::Half": "float16", "double": "float64",
          "c10::Float8_e4m3fn": "float8", "c10::Float8_e5m2": "float8"}


def trace_flops(trace: Trace, host_windows: np.ndarray) -> Optional[FlopCount]:
    """FLOPs per step of the steps in `host_windows`, by phase and dtype; None when the trace has none of the ops."""
    ops = trace.flop_ops
    if not len(ops) or not len(host_windows):
        return None
    keep = outermost_in(ops, host_windows)
    if not len(keep):
        return None
    phases = point_phases(trace, ops.ts[keep], (ops.thread_codes[keep], ops.threads), host_windows)
    # a step's ops repeat every step: each kind of op is counted once, then its count given to each op of it
    kinds = ops.kind_codes[keep]
    per_kind = np.full(len(ops.kinds), np.nan)
    dtype_of, name_of = np.zeros(len(ops.kinds), dtype=np.int64), np.zeros(len(ops.kinds), dtype=np.int64)
    dtypes: dict[str, int] = {}
    names: dict[str, int] = {}
    for code in present_in_order(kinds).tolist():  # the kinds of the kept ops only (another may not be readable)
        kind = ops.kinds[code]
        per_kind[code] = _or_nan(op_flops(kind.name, kind.dims, kind.scalars))
        dtype_of[code] = dtypes.setdefault(op_dtype(kind.types), len(dtypes))
        name_of[code] = names.setdefault(kind.name, len(names))
    flops, name_list = per_kind[kinds], list(names)
    counted = ~np.isnan(flops)
    steps = len(host_windows)
    by_phase = sums_in_order(phases[counted], flops[counted], PHASES)
    by_dtype = sums_in_order(dtype_of[kinds][counted], flops[counted], list(dtypes))
    return FlopCount(
        per_step=sum(by_phase.values()) / steps,
        by_phase={p: v / steps for p, v in by_phase.items()},
        by_dtype={d: v / steps for d, v in by_dtype.items()},
        source="the trace's shapes (matrix products, convolutions, attention)",
        uncounted=tuple(f"{name_list[c]} x{n // steps or n}" for c, n in most_common(name_of[kinds][~counted])))


def _or_nan(value: Optional[float]) -> float:
    return np.nan if value is None else value


def sums_in_order(codes: np.ndarray, weights: np.ndarray, labels: Sequence) -> dict:
    """The weights summed by code, in order (the same sums as adding them one by one), keyed by label in order of
    each code's first appearance."""
    sums = np.bincount(codes, weights=weights, minlength=len(labels))
    return {labels[c]: float(sums[c]) for c in present_in_order(codes).tolist()}


def most_common(codes: np.ndarray) -> list[tuple[int, int]]:
    """(code, count) by count, the first to appear first among equal counts (as Counter.most_common)."""
    present = present_in_order(codes)
    counts = np.bincount(codes)[present] if len(codes) else np.zeros(0, dtype=np.int64)
    ranked = np.argsort(-counts, kind="stable")
    return list(zip(present[ranked].tolist(), counts[ranked].tolist()))


def op_dtype(types) -> str:
    first = next((t for t in types or () if t and t != "Scalar"), None)
    return DTYPES.get(first, first or "unknown")


def op_flops(name: str, dims, scalars) -> Optional[float]:
    """FLOPs of one op from its input dims (and scalar arguments); None when they cannot be read."""
    try:
        if name in GEMM:
            return _gemm(name, dims)
        if name == "aten::convolution":
            return _convolution(dims, scalars)
        if name == "aten::convolution_backward":
            return _convolution_backward(dims, scalars)
        if name in ATTENTION:  # a backward's inputs start with the output's gradient, then query, key, value
            return _attention_backward(dims[1:]) if name.endswith("_backward") else _attention(dims)
    except (TypeError, ValueError, IndexError):
        return None
    return None


def _gemm_operands(name: str, dims) -> tuple:
    """The two matrices multiplied: after the bias for the ops that add one."""
    with_bias = name in ("aten::addmm", "aten::baddbmm", "aten::addbmm", "aten::_addmm_activation")
    return (dims[1], dims[2]) if with_bias else (dims[0], dims[1])


def _gemm(name: str, dims) -> float:
    a, b = _gemm_operands(name, dims)
    if len(a) == 2:
        (m, k), (_, n) = a, b
        return 2.0 * m * k * n
    (batch, m, k), (_, _, n) = a, b
    return 2.0 * batch * m * k * n


def _convolution(dims, scalars) -> float:
    """input [N, C, *spatial], weight [O, C/groups, *kernel]; stride, padding, dilation, transposed as text."""
    x, w = dims[0], dims[1]
    transposed = str(scalars[6]).strip().lower() == "true"
    # the gradient of a convolution (transposed): the same count with input and output swapped
    positions = x[2:] if transposed else _conv_output_spatial(x, w, scalars)
    return 2.0 * x[0] * math.prod(w) * math.prod(positions)


def _conv_output_spatial(x, w, scalars) -> list[int]:
    stride, padding, dilation = (_ints(scalars[i], len(w) - 2) for i in (3, 4, 5))
    return [(size + 2 * p - d * (k - 1) - 1) // s + 1 for size, k, s, p, d in zip(x[2:], w[2:], stride, padding,
                                                                                   dilation)]


def op_output_elements(name: str, dims, scalars) -> Optional[float]:
    """Elements an op writes (its outputs, or the gradients a backward computes); None when unreadable."""
    try:
        if name in GEMM:
            a, b = _gemm_operands(name, dims)
            batch = a[0] if len(a) == 3 and name != "aten::addbmm" else 1
            return float(batch * a[-2] * b[-1])
        if name == "aten::convolution":
            x, w = dims[0], dims[1]
            transposed = str(scalars[6]).strip().lower() == "true"
            if transposed:
                return None
            return float(x[0] * w[0] * math.prod(_conv_output_spatial(x, w, scalars)))
        if name == "aten::convolution_backward":  # the input's and the weight's gradients
            return float(math.prod(dims[1]) + math.prod(dims[2]))
        if name in ATTENTION:
            if name.endswith("_backward"):  # the gradients of query, key and value
                return float(sum(math.prod(d) for d in dims[1:4]))
            (b, h, length, _), value = dims[0], dims[2]
            return float(b * h * length * value[-1])
    except (TypeError, ValueError, IndexError):
        return None
    return None


def _convolution_backward(dims, scalars) -> float:
    """grad_output [N, O, *out], input, weight: each gradient asked for (output_mask) costs the forward's count,
    over the output's positions (the input's for a transposed convolution)."""
    grad_out, x, w = dims[0], dims[1], dims[2]
    transposed = len(scalars) > 7 and str(scalars[7]).strip().lower() == "true"
    forward = 2.0 * grad_out[0] * math.prod(w) * math.prod(x[2:] if transposed else grad_out[2:])
    mask = re.findall(r"true|false", str(scalars[10]).lower()) if len(scalars) > 10 else []
    wanted = sum(1 for m in mask[:2] if m == "true") if mask else 2
    return forward * wanted


def _attention(dims) -> float:
    """query [B, H, L, E], key [B, H, S, E], value [B, H, S, Ev]: Q K^T and P V."""
    (b, h, length, e), (_, _, s, _), (_, _, _, ev) = dims[0], dims[1], dims[2]
    return 2.0 * b * h * length * s * (e + ev)


def _attention_backward(dims) -> float:
    """The scores recomputed (Q K^T), then the gradients of P V (two products) and of Q K^T (two)."""
    (b, h, length, e), (_, _, s, _), (_, _, _, ev) = dims[0], dims[1], dims[2]
    return 2.0 * b * h * length * s * (3 * e + 2 * ev)


def _ints(text, count: int) -> list[int]:
    values = [int(v) for v in re.findall(r"-?\d+", str(text))]
    if not values:
        raise ValueError(text)
    return values * count if len(values) == 1 else values
