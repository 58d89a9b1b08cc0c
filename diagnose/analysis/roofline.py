"""A roofline for the ops that do a step's arithmetic (matrix products, convolutions, attention). Per kind of op
(name, input shapes, dtype): its FLOPs and the bytes it must move (each input read once, each output written
once: the least traffic any implementation has), hence its arithmetic intensity; against the machine's balance
(the dtype's peak FLOP/s over the memory bandwidth) that says which roof bounds it, and its time says how close
to that roof it ran. Timed by its kernels on a GPU (those launched from inside the op), by the op itself on the
host. As TraceLens rooflines ops from shapes, but against the peaks measured on the machine."""
from __future__ import annotations

import math
from collections import defaultdict
from typing import Optional

import numpy as np

from diagnose.analysis.flops import op_dtype, op_flops, op_output_elements
from diagnose.model import Peak, Roofline, RooflineOp
from diagnose.trace import FlopOps, OpKind, Trace, from_launch, in_start_order, outermost_in, present_in_order

ELEMENT_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2, "float8": 1, "float64": 8}
TOP = 12  # ops kept in the diagnosis; the totals cover all
LOW_ROOF = 0.25  # an op under this share of its roof is far from what the machine can do for it


def roofline(trace: Trace, host_windows: np.ndarray, peaks: dict[str, Peak], tf32: bool,
             mean_step_s: float) -> Optional[Roofline]:
    """`peaks`: one per dtype (and "memory"); `tf32`: float32 products ran as TF32; `mean_step_s`: the profiled
    step the ops' times are shares of. None without a memory roof or ops with shapes."""
    ops, bandwidth = trace.flop_ops, peaks.get("memory")
    if bandwidth is None or not len(ops) or not len(host_windows) or mean_step_s <= 0:
        return None
    keep = outermost_in(ops, host_windows)
    seconds = _kernel_seconds(trace, ops, keep) if trace.has_gpu else ops.dur[keep] / 1e6
    # each kind of op (name, dims, dtypes, scalars) kept is measured once; its ops are grouped by name, shapes, dtype
    kinds = ops.kind_codes[keep]
    group_codes = np.zeros(len(ops.kinds), dtype=np.int64)
    readable, moved_by_kind = np.zeros(len(ops.kinds), dtype=bool), np.zeros((len(ops.kinds), 2))
    group_index: dict[tuple, int] = {}
    for code in present_in_order(kinds).tolist():
        kind = ops.kinds[code]
        counted = _flops_and_bytes(kind)
        key = (kind.name, _shapes(kind.dims), _dtype(op_dtype(kind.types), tf32, peaks))
        group_codes[code] = group_index.setdefault(key, len(group_index))
        if counted is not None:
            readable[code], moved_by_kind[code] = True, counted
    groups = list(group_index)
    measured = readable[kinds] & (seconds != 0)
    moved = moved_by_kind[kinds[measured]]
    group_of = group_codes[kinds[measured]]
    calls = np.bincount(group_of, minlength=len(groups))
    flops = np.bincount(group_of, weights=moved[:, 0], minlength=len(groups))
    bytes_moved = np.bincount(group_of, weights=moved[:, 1], minlength=len(groups))
    spent = np.bincount(group_of, weights=seconds[measured], minlength=len(groups))
    rows = [r for r in (_row(groups[g], (int(calls[g]), float(flops[g]), float(bytes_moved[g]), float(spent[g])),
                             peaks, bandwidth, len(host_windows), mean_step_s)
                        for g in present_in_order(group_of).tolist()) if r is not None]
    return _summary(rows, peaks, bandwidth, "device kernels" if trace.has_gpu else "host op time") if rows else None


def _dtype(dtype: str, tf32: bool, peaks: dict[str, Peak]) -> str:
    """float32 products ran as TF32 where the run allowed it (and the machine has its peak)."""
    return "tf32" if tf32 and dtype == "float32" and "tf32" in peaks else dtype


def _flops_and_bytes(kind: OpKind) -> Optional[tuple[float, float]]:
    name, dims = kind.name, kind.dims
    flops = op_flops(name, dims, kind.scalars)
    written = op_output_elements(name, dims, kind.scalars)
    element = ELEMENT_BYTES.get(op_dtype(kind.types))
    if flops is None or written is None or element is None:
        return None
    read = sum(math.prod(d) for d in dims if isinstance(d, list) and d)
    return flops, (read + written) * element


def _row(key: tuple, group: tuple[int, float, float, float], peaks: dict[str, Peak], bandwidth: Peak, steps: int,
         mean_step_s: float) -> Optional[RooflineOp]:
    (name, shapes, dtype), (calls, flops, moved, seconds) = key, group
    peak = peaks.get(dtype)
    if peak is None or not moved or not seconds:
        return None
    intensity = flops / moved
    roof = min(peak.per_s, intensity * bandwidth.per_s)
    achieved = flops / seconds
    return RooflineOp(name=name, shapes=shapes, dtype=dtype, calls_per_step=calls / steps, flops=flops / calls,
                      bytes=moved / calls, seconds=seconds / calls, intensity=intensity, achieved_flops_s=achieved,
                      roof_flops_s=roof, bound="compute" if intensity * bandwidth.per_s >= peak.per_s else "memory",
                      roof_frac=achieved / roof, step_frac=seconds / steps / mean_step_s)


def _summary(rows: list[RooflineOp], peaks: dict[str, Peak], bandwidth: Peak, timing: str) -> Roofline:
    rows.sort(key=lambda r: r.step_frac, reverse=True)
    by_dtype: dict[str, float] = defaultdict(float)
    for r in rows:
        by_dtype[r.dtype] += r.step_frac
    main = peaks[max(by_dtype, key=by_dtype.get)]
    low = [r for r in rows if r.roof_frac < LOW_ROOF]
    kinds = {r.bound for r in low}
    return Roofline(bandwidth=bandwidth, roofs=tuple(peaks[d] for d in sorted(by_dtype)),
                    balance=main.per_s / bandwidth.per_s, timing=timing, ops=tuple(rows[:TOP]),
                    counted_frac=sum(r.step_frac for r in rows), below_roof_frac=sum(r.step_frac for r in low),
                    below_roof_bound=kinds.pop() if len(kinds) == 1 else ("mixed" if kinds else ""),
                    below_roof_saving_frac=sum(r.step_frac * (1 - r.roof_frac / LOW_ROOF) for r in low),
                    dtype_frac=dict(by_dtype))


def _shapes(dims) -> str:
    tensors = [d for d in dims or () if isinstance(d, list) and d]
    return " x ".join(str(d) for d in tensors[:3]) + (" ..." if len(tensors) > 3 else "")


def _kernel_seconds(trace: Trace, ops: FlopOps, keep: np.ndarray) -> np.ndarray:
    """Each kept op's kernels' time: the kernels launched by the runtime calls made inside the op, on its thread
    (0 where its thread made no runtime call)."""
    runtime = trace.runtime
    per_call = _kernel_seconds_by_call(trace)
    codes, table = runtime.thread_codes()
    code_of = {table[c]: c for c in present_in_order(codes).tolist()}
    seconds = np.zeros(len(keep))
    op_threads = ops.thread_codes[keep]
    for code in present_in_order(op_threads).tolist():
        if ops.threads[code] not in code_of:
            continue
        calls = in_start_order(runtime.start, np.flatnonzero(codes == code_of[ops.threads[code]]))
        starts, cumulative = runtime.start[calls], np.concatenate([[0.0], np.cumsum(per_call[calls])])
        mine = np.flatnonzero(op_threads == code)
        index = keep[mine]
        lo = np.searchsorted(starts, ops.ts[index])
        hi = np.searchsorted(starts, ops.ts[index] + ops.dur[index])
        seconds[mine] = cumulative[hi] - cumulative[lo]
    return seconds


def _kernel_seconds_by_call(trace: Trace) -> np.ndarray:
    """Seconds of the kernels each runtime call launched, added in the kernels' order (a big trace's arrays are
    taken whole where every kernel is linked: each masked copy is as long as the kernels)."""
    kernels = trace.kernels
    launcher = from_launch(trace, kernels, np.arange(len(trace.runtime)))
    durations = kernels.end - kernels.start
    durations /= 1e6
    per_call = np.zeros(len(trace.runtime))
    linked = launcher >= 0
    if linked.all():
        np.add.at(per_call, launcher, durations)
    else:
        np.add.at(per_call, launcher[linked], durations[linked])
    return per_call
