"""Groups of metric values (names catalogued in metrics.py) that analyze.py merges into one mapping: the host
overhead's split, the device's (GPU busy, idle causes, copies, launches), the capture's (loaders, memory,
allocator, dataset probe, system samples) and the unprofiled step time. None is unknown for this run."""
from __future__ import annotations

from typing import Optional

import numpy as np

import diagnose.analysis.gpu as gpu
import diagnose.analysis.ops as op_stats
from diagnose.analysis.devices import DEFAULT_TENSOR_SPEEDUP, tensor_core_metrics
from diagnose.analysis.timeline import StepTimeline
from diagnose.model import Capture, Samples, unprofiled_step_s
from diagnose.trace import Trace
from diagnose.trace import intervals as iv


def host_split(host_lines, host_frac: float) -> dict:
    """Host overhead split into the user's own work and torch's Python, in proportion to the sampled lines."""
    attributed = sum(h.frac for h in host_lines)
    if not host_lines or attributed <= 0:
        return {"host_user_frac": None, "host_framework_frac": None}
    user = sum(h.frac for h in host_lines if not h.in_torch) / attributed
    return {"host_user_frac": host_frac * user, "host_framework_frac": host_frac * (1 - user)}


def _flag(value) -> Optional[float]:
    return None if value is None else float(bool(value))


def unprofiled_metrics(capture: Optional[Capture], profiled_mean_s: float) -> dict:
    plain = unprofiled_step_s(capture)
    return {
        "step_time_unprofiled_s": plain,
        "profiler_overhead_factor": profiled_mean_s / plain if plain and profiled_mean_s > 0 else None,
    }


def device_metrics(trace: Trace, steady: Trace, capture: Optional[Capture], timeline: StepTimeline,
                    total_us: float, n: int, peaks: tuple = ()) -> dict:
    used_cuda = capture is not None and capture.memory_kind == "cuda"
    has_gpu = trace.has_gpu or used_cuda
    capability = capture.environment.gpu_capability if capture else _trace_capability(trace)
    windows, within, host_within = timeline.device, iv.union(timeline.device), iv.union(timeline.host)
    metrics = {"has_gpu": float(has_gpu), **gpu.communication_metrics(trace, within, total_us)}
    if not has_gpu:
        return metrics
    kernels = iv.intersect(iv.union_of(trace.kernels), within)
    fp32_gemm = op_stats.fp32_gemm_time_us(trace, within) / total_us
    name = capture.environment.gpu_name if capture else trace_gpu_name(trace.metadata)
    rates = tensor_core_metrics(capability, name, peaks)
    speedup = rates["tensor_core_speedup"] or DEFAULT_TENSOR_SPEEDUP  # unknown GPU: the conservative default
    return {
        **metrics,
        **rates,
        "gpu_busy_frac": iv.total(kernels) / total_us,
        "tensor_core_gpu": None if capability is None else float(float(capability) >= 7.0),
        "fp32_gemm_frac": fp32_gemm,
        "elementwise_frac": op_stats.elementwise_kernel_time_us(trace, within) / total_us,
        "tensor_core_loss_frac": fp32_gemm * (1 - 1 / speedup),
        "syncs_per_step": float(gpu.sync_points(steady).sum()) / n,
        **gpu.idle_attribution(trace, windows, total_us),
        **gpu.copy_metrics(trace, within, host_within, total_us, n),
        **gpu.launch_metrics(trace, within, host_within, n),
    }


def trace_loader_metrics(trace: Trace) -> dict:
    """What the DataLoader spans' names tell: `_SingleProcessDataLoaderIter` loads in the training process."""
    kinds = {("multi" if "MultiProcessing" in n else "single") for n in trace.dataloader.names}
    if not kinds:
        return {}
    multi = "multi" in kinds
    return {"loader_multiprocess": float(multi), **({} if multi else {"loader_num_workers": 0.0})}


def trace_gpu_name(metadata: dict) -> Optional[str]:
    """The first device's name in a trace's deviceProperties, None when the trace has none."""
    props = metadata.get("deviceProperties")
    return props[0].get("name") if isinstance(props, list) and props and isinstance(props[0], dict) else None


def _trace_capability(trace: Trace) -> Optional[str]:
    props = trace.metadata.get("deviceProperties") or []
    if not props:
        return None
    return f"{props[0].get('computeMajor', 0)}.{props[0].get('computeMinor', 0)}"


def capture_metrics(capture: Optional[Capture], samples: Optional[Samples], n: int) -> dict:
    if capture is None:
        return {}
    env = capture.environment
    loader = training_loader(capture)
    probe = capture.dataset_probe
    counters = capture.counters
    peak, capacity = capture.peak_memory_bytes, capture.memory_capacity_bytes
    return {
        "cpu_count": float(env.cpu_count),
        "peak_memory_bytes": _num(peak), "memory_capacity_bytes": _num(capacity),
        "peak_memory_frac": peak / capacity if peak and capacity else None,
        "empty_cache_per_step": counters.get("empty_cache_calls", 0) / max(capture.steps_seen, 1),
        **allocator_metrics(capture.allocator),
        "autocast_used": float(counters.get("autocast", 0) > 0),
        "data_parallel_used": float(counters.get("data_parallel", 0) > 0),
        "loader_count": float(len(capture.loaders)),
        "loader_num_workers": _num(loader.num_workers if loader else None),
        "loader_multiprocess": _flag(loader.num_workers > 0 if loader else None),
        "loader_batch_size": _num(loader.batch_size if loader else None),
        "micro_batches_per_step": float(capture.micro_batches_per_step),
        "loader_pin_memory": _flag(loader.pin_memory if loader else None),
        "loader_persistent_workers": _flag(loader.persistent_workers if loader else None),
        "dataset_deterministic": _flag(probe.deterministic if probe else None),
        "dataset_iterable": _flag(loader.dataset_kind == "iterable" if loader else None),
        "dataset_stream_sharded": _flag(probe.stream_sharded if probe else None),
        "dataset_item_s": probe.item_s if probe else None,
        "dataset_item_cpu_frac": probe.item_cpu_frac if probe else None,
        **sample_metrics(samples),
        **loss_metrics(capture.loss),
    }


def loss_metrics(loss) -> dict:
    """Whether the losses passed to backward() were finite (run mode; unknown without a loss)."""
    if loss is None:
        return {"loss_nonfinite": None, "loss_nonfinite_step": None, "loss_last_finite": None}
    bad = loss.first_nonfinite_step is not None
    return {"loss_nonfinite": float(bad), "loss_nonfinite_step": _num(loss.first_nonfinite_step),
            "loss_last_finite": loss.last_finite}


def allocator_metrics(stats: dict[str, int]) -> dict:
    """The CUDA allocator's counters as metrics (run mode on a GPU; unknown otherwise)."""
    allocated, reserved = stats.get("peak_allocated_bytes"), stats.get("peak_reserved_bytes")
    return {
        "allocator_retries": _num(stats.get("alloc_retries")),
        "allocator_ooms": _num(stats.get("ooms")),
        "peak_allocated_bytes": _num(allocated),
        "fragmentation_frac": 1 - allocated / reserved if allocated is not None and reserved else None,
    }


def sample_metrics(samples: Optional[Samples]) -> dict:
    if samples is None or not samples.t_s:
        return {"process_cpu_frac": None, "gpu_util_mean_frac": None}
    t = np.asarray(samples.t_s)
    lo, hi = samples.window_s or (t[0], t[-1])
    inside = (t >= lo) & (t <= hi)
    if not inside.any():
        inside = np.ones(len(t), dtype=bool)
    cpu = np.asarray(samples.process_cpu_frac, dtype=np.float64)[inside]
    gpu = [v for v, ok in zip(samples.gpu_util_frac, inside) if ok and v is not None] if samples.gpu_util_frac else []
    return {"process_cpu_frac": float(cpu.mean()), "gpu_util_mean_frac": float(np.mean(gpu)) if gpu else None}


def _num(value) -> Optional[float]:
    return None if value is None else float(value)


def training_loader(capture: Optional[Capture]):
    """The loader training waited on most (a validation loader can be the one), else the training loader."""
    if capture is None or not capture.loaders:
        return None
    index = capture.wait_loader if capture.wait_loader is not None else capture.train_loader
    return capture.loaders[index] if index is not None else None
