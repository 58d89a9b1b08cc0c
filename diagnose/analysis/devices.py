"""What a GPU's tensor cores are worth against its fp32 units: from the device's peaks (measured on this machine,
else its datasheet by name: capture/datasheets.py) where known, else by compute capability from the table below.

Dense peak rates (TFLOP/s) from NVIDIA's datasheets, sparsity figures not used. Where one compute capability
covers data-centre and GeForce parts, the data-centre part is listed and GeForce parts get half the tensor
ratio (their fp16/bf16 tensor rate with fp32 accumulation is halved). A GPU not in the table gets a
conservative 2x, the figure this tool used before it priced devices.
"""
from __future__ import annotations

from typing import Optional

from diagnose.lean_dataclass import dataclass
from diagnose.model import Peak

DEFAULT_TENSOR_SPEEDUP = 2.0
AMD_MARKERS = ("amd", "instinct", "radeon", "mi100", "mi200", "mi210", "mi250", "mi300")


@dataclass(frozen=True)
class TensorCoreRates:
    part: str
    fp32: float
    tf32: Optional[float]  # None before Ampere
    half: float  # bf16 from Ampere on, fp16 before
    source: str


RATES: dict[str, TensorCoreRates] = {
    "7.0": TensorCoreRates("V100 SXM2", 15.7, None, 125.0, "NVIDIA V100 datasheet: FP32 15.7, FP16 tensor 125"),
    "7.5": TensorCoreRates("T4", 8.1, None, 65.0, "NVIDIA T4 datasheet: FP32 8.1, FP16 tensor 65"),
    "8.0": TensorCoreRates("A100 SXM", 19.5, 156.0, 312.0,
                           "NVIDIA A100 datasheet: FP32 19.5, TF32 156, BF16 312 (dense)"),
    "8.6": TensorCoreRates("A10", 31.2, 62.5, 125.0, "NVIDIA A10 datasheet: FP32 31.2, TF32 62.5, BF16 125 (dense)"),
    "8.9": TensorCoreRates("L40S", 91.6, 183.0, 362.05,
                           "NVIDIA L40S datasheet: FP32 91.6, TF32 183, BF16 362 (dense)"),
    "9.0": TensorCoreRates("H100 SXM / H200", 67.0, 494.7, 989.4,
                           "NVIDIA H100 datasheet (H200: same compute): FP32 67, TF32 495, BF16 989 (dense)"),
}


def tensor_core_metrics(capability: Optional[str], gpu_name: Optional[str],
                        peaks: tuple[Peak, ...] = ()) -> dict[str, Optional[float]]:
    """tensor_core_speedup, tf32_speedup, bf16_supported and the capability as a number; unknown without one. The
    ratios come from the device's peaks where they are known (measured on this machine first, else its datasheet
    by name), else from this table by compute capability."""
    number = _number(capability)
    if number is None:
        return {"tensor_core_speedup": None, "tf32_speedup": None, "bf16_supported": None,
                "gpu_compute_capability": None}
    measured = _peak_ratios(peaks)
    name = (gpu_name or "").lower()
    # AMD GPUs report a gfx version as their capability (an MI250 says 9.0): the table is NVIDIA's
    rates = None if any(m in name for m in AMD_MARKERS) else RATES.get(f"{number:.1f}")
    geforce = "geforce" in name
    if rates is None:
        half, tf32 = (DEFAULT_TENSOR_SPEEDUP if number >= 7.0 else 1.0), None
    else:
        half = rates.half / rates.fp32 / (2 if geforce else 1)
        tf32 = rates.tf32 / rates.fp32 / (2 if geforce else 1) if rates.tf32 else None
    amd = any(m in name for m in AMD_MARKERS)
    if measured is not None:  # a ratio the peaks lack (TF32 not measured) stays the table's
        half, tf32 = measured[0], measured[1] or tf32
    return {"tensor_core_speedup": max(half, 1.0), "tf32_speedup": max(tf32, 1.0) if tf32 else None,
            "bf16_supported": None if amd else float(number >= 8.0), "gpu_compute_capability": None if amd else number}


def _peak_ratios(peaks: tuple[Peak, ...]) -> Optional[tuple[float, Optional[float]]]:
    """(best of bf16/fp16 over fp32, TF32 over fp32), each ratio within one source: the measured peaks when they
    hold fp32 and a half precision, else the datasheet's; None when neither does."""
    for measured in (True, False):
        rates = {p.dtype: p.per_s for p in peaks if p.source.startswith("measured") == measured}
        half = max((rates[d] for d in ("bfloat16", "float16") if d in rates), default=None)
        if rates.get("float32") and half is not None:
            return half / rates["float32"], (rates["tf32"] / rates["float32"] if "tf32" in rates else None)
    return None


def _number(capability: Optional[str]) -> Optional[float]:
    try:
        return float(capability) if capability not in (None, "") else None
    except ValueError:
        return None
