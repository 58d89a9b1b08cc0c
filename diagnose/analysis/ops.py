"""Op-level statistics from a trace: top ops by self time, top-level op counts, syncs, copies, GEMM kernels."""
from __future__ import annotations

import re

import numpy as np

from diagnose.model import OpStat
from diagnose.trace import Spans, Trace, present_in_order
from diagnose.trace import intervals as iv

GEMM_KERNEL = re.compile(r"gemm|conv|cutlass|xmma|wgrad|dgrad|fprop|implicit_convolve", re.I)
TENSOR_CORE_KERNEL = re.compile(r"h884|h1688|h16816|s1688|s16816|i8816|hmma|tensorop|"
                                r"16816|1688|884|bf16|f16|tf32|wmma|_tc_", re.I)


# Elementwise, normalization and reduction work: each reads and writes its whole tensor for little arithmetic,
# so it is bound by memory bandwidth, and a chain of them is what a compiler fuses into one pass.
ELEMENTWISE_KERNEL = re.compile(r"elementwise|reduce_kernel|vectorized|softmax|layer_?norm|batch_?norm|dropout|"
                                r"CatArray", re.I)
ELEMENTWISE_OPS = frozenset(
    "add add_ sub sub_ mul mul_ div div_ neg exp log pow sqrt rsqrt tanh sigmoid relu relu_ gelu silu "
    "threshold_backward gelu_backward silu_backward sigmoid_backward tanh_backward native_layer_norm "
    "native_layer_norm_backward _softmax _softmax_backward_data _log_softmax _log_softmax_backward_data "
    "native_dropout native_dropout_backward masked_fill masked_fill_ where clamp clamp_min fill_ zero_ copy_ "
    "addcmul_ addcdiv_ lerp_ mean sum var_mean native_batch_norm native_batch_norm_backward".split())


def elementwise_kernel_time_us(trace: Trace, within: np.ndarray) -> float:
    """GPU time of elementwise, normalization and reduction kernels inside the measured steps."""
    mask = trace.kernels.mask(lambda n: bool(ELEMENTWISE_KERNEL.search(n)) and not GEMM_KERNEL.search(n))
    return iv.total(iv.intersect(iv.union_of(trace.kernels, mask), within))


def elementwise_op_self_us(ops: Spans, self_t: np.ndarray, optimizer: np.ndarray) -> float:
    """Host self time of elementwise, normalization and reduction ops (the CPU runs them itself), outside the
    `optimizer` intervals: an optimizer's update is its own diagnosis (a fused or foreach optimizer)."""
    if not len(ops):
        return 0.0
    mask = ops.mask(lambda n: n.removeprefix("aten::") in ELEMENTWISE_OPS) & ~iv.contains(optimizer, ops.start)
    return float(self_t[mask].sum())


def top_ops(ops: Spans, self_t: np.ndarray, limit: int = 15) -> tuple[OpStat, ...]:
    if not len(ops):
        return ()
    codes, uniques = ops.factorized()
    names = present_in_order(codes)  # the names these ops hold, in order of first appearance (ties rank so)
    counts = np.bincount(codes, minlength=len(uniques))[names]
    totals = np.bincount(codes, weights=ops.end - ops.start, minlength=len(uniques))[names]
    selfs = np.bincount(codes, weights=self_t, minlength=len(uniques))[names]
    ranked = np.argsort(-selfs, kind="stable")[:limit]
    return tuple(OpStat(uniques[names[i]], int(counts[i]), float(totals[i]) / 1e6, float(selfs[i]) / 1e6)
                 for i in ranked)


def h2d_pageable_frac(trace: Trace):
    h2d = trace.memcpy.mask(lambda n: "HtoD" in n)
    if not h2d.any():
        return None
    pageable = trace.memcpy.mask(lambda n: "Pageable" in n) & h2d
    durations = trace.memcpy.end - trace.memcpy.start
    return float(durations[pageable].sum() / max(durations[h2d].sum(), 1e-9))


def fp32_gemm_time_us(trace: Trace, within: np.ndarray) -> float:
    """GPU time of fp32 GEMM/convolution kernels without tensor-core markers, inside the measured steps."""
    mask = trace.kernels.mask(lambda n: bool(GEMM_KERNEL.search(n)) and not TENSOR_CORE_KERNEL.search(n))
    return iv.total(iv.intersect(iv.union_of(trace.kernels, mask), within))
