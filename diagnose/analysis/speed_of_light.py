"""How far a step is from what the device can do: the step's FLOPs over its time against the device's peak in the
dtypes the step computes in (MFU; each dtype's FLOPs at its own peak), and against the best dtype the device
offers; the speed-of-light step is the step's FLOPs at that best peak. Peaks measured on this machine are
preferred; a datasheet's dense figure stands in where none was measured (a trace from another machine). Every FLOP
executed counts, recomputation included: without activation checkpointing this is MFU, with it hardware FLOPs
utilisation."""
from __future__ import annotations

from typing import Optional

from diagnose.lean_dataclass import dataclass
from diagnose.model import FlopCount, Peak, Roofline, SpeedOfLight

# dtypes a training step can switch to by a setting (autocast, TF32); float64 and float8 are not such a switch
TRAINING_DTYPES = ("float32", "tf32", "bfloat16", "float16")


@dataclass(frozen=True)
class Busy:
    """The share of the step the device computed, and the step time that share was measured over (profiled)."""
    frac: Optional[float]
    step_s: float


def speed_of_light(flops: Optional[FlopCount], step_s: Optional[float], peaks: tuple[Peak, ...],
                   cross_check: Optional[FlopCount] = None, busy: Optional[Busy] = None,
                   tf32: bool = False, roofline: Optional[Roofline] = None) -> Optional[SpeedOfLight]:
    """`tf32`: float32 matrix products ran as TF32 (allowed in the run), so their peak is the TF32 one."""
    if flops is None or not flops.per_step or not step_s:
        return None
    chosen = preferred_peaks(peaks)
    by_dtype = {("tf32" if tf32 and d == "float32" and "tf32" in chosen else d): v for d, v in flops.by_dtype.items()}
    dtype = max(by_dtype, key=by_dtype.get) if by_dtype else "unknown"
    achieved = flops.per_step / step_s
    at_peak_s = _seconds_at_peak(by_dtype, chosen)
    stale = _stale(by_dtype, chosen, at_peak_s, step_s)
    if stale:  # the step beat a measured peak: that peak is stale, raised to what this step achieved (MFU 1)
        factor = at_peak_s / step_s  # the step's FLOPs took this much longer at the peak than the step did
        raised = {d: Peak(p.device, d, p.per_s * factor, f"{p.source}; {RAISED} ({factor:.2f}x the peak measured "
                                                            "earlier, on a busier machine)") for d, p in stale.items()}
        peaks = tuple(raised.get(p.dtype, p) if p is chosen.get(p.dtype) else p for p in peaks)
        chosen = {**chosen, **raised}
        at_peak_s = min(step_s, _seconds_at_peak(by_dtype, chosen))  # not 1 + 1e-16
    best = max((chosen[d] for d in TRAINING_DTYPES if d in chosen), key=lambda p: p.per_s, default=None)
    busy_s = busy.frac * busy.step_s if busy is not None and busy.frac else None
    return SpeedOfLight(
        flops=flops, step_s=step_s, achieved_flops_s=achieved, dtype=dtype, peak=chosen.get(dtype),
        mfu=at_peak_s / step_s if at_peak_s is not None else None, best=best,
        mfu_best=achieved / best.per_s if best else None,
        light_step_s=flops.per_step / best.per_s if best else None,
        cross_check=cross_check, peaks=peaks, busy_frac=busy.frac if busy is not None else None,
        # over the same (profiled) steps the busy share was measured in
        mfu_while_busy=at_peak_s / busy_s if at_peak_s is not None and busy_s else None, roofline=roofline)


RAISED = "raised to this run's achieved rate"


def _stale(by_dtype: dict[str, float], chosen: dict[str, Peak], at_peak_s: Optional[float],
           step_s: float) -> dict[str, Peak]:
    """The measured peaks of the step's dtypes when the step ran faster than they allow (MFU over 1): a peak cached
    while the machine was loaded (a neighbour's burst, a throttled clock). {} when the step is under them, or when a
    datasheet's peak is among them (a step past a datasheet's dense figure is miscounted FLOPs, not a stale peak)."""
    if at_peak_s is None or at_peak_s <= step_s:
        return {}
    used = {d: chosen[d] for d, v in by_dtype.items() if v}
    if not used or not all(p.source.startswith("measured") for p in used.values()):
        return {}
    return used


def stale_peak_floors(light: Optional[SpeedOfLight]) -> dict[str, float]:
    """dtype -> the rate this run achieved, for each measured peak the run beat (raised by speed_of_light): what a
    fresh measurement of the machine's peak must reach at least."""
    if light is None:
        return {}
    return {p.dtype: p.per_s for p in light.peaks if RAISED in p.source}


def _seconds_at_peak(by_dtype: dict[str, float], chosen: dict[str, Peak]) -> Optional[float]:
    """The step's FLOPs, each dtype's at that dtype's peak; None when a dtype with FLOPs has no known peak."""
    if not by_dtype or any(d not in chosen for d, v in by_dtype.items() if v):
        return None
    return sum(v / chosen[d].per_s for d, v in by_dtype.items() if v)


def preferred_peaks(peaks: tuple[Peak, ...]) -> dict[str, Peak]:
    """One peak per dtype: measured on this machine where there is one, else the datasheet's."""
    chosen: dict[str, Peak] = {}
    for peak in sorted(peaks, key=lambda p: p.source.startswith("measured")):
        chosen[peak.dtype] = peak
    return chosen


def speed_metrics(light: Optional[SpeedOfLight]) -> dict[str, Optional[float]]:
    if light is None:
        return {"mfu": None, "mfu_best_dtype": None, "flops_per_step": None, "achieved_flops_s": None,
                "best_dtype_speedup": None, **_roofline_metrics(None, None)}
    ratio = light.best.per_s / light.peak.per_s if light.best and light.peak else None
    return {"mfu": light.mfu, "mfu_best_dtype": light.mfu_best, "flops_per_step": light.flops.per_step,
            "achieved_flops_s": light.achieved_flops_s, "best_dtype_speedup": ratio,
            **_roofline_metrics(light.roofline, _fp32_ratio(light))}


def _fp32_ratio(light: SpeedOfLight) -> Optional[float]:
    fp32 = preferred_peaks(light.peaks).get("float32")
    return light.best.per_s / fp32.per_s if light.best and fp32 else None


def _roofline_metrics(roof: Optional[Roofline], fp32_ratio: Optional[float]) -> dict[str, Optional[float]]:
    """`fp32_ratio`: the best dtype's peak over float32's: what the fp32 ops' time would shrink by at best."""
    if roof is None:
        return {"counted_ops_frac": None, "below_roof_frac": None, "below_roof_saving_frac": None,
                "fp32_ops_frac": None, "faster_dtype_saving_frac": None}
    fp32 = roof.dtype_frac.get("float32", 0.0)
    return {"counted_ops_frac": roof.counted_frac, "below_roof_frac": roof.below_roof_frac,
            "below_roof_saving_frac": roof.below_roof_saving_frac, "fp32_ops_frac": fp32,
            "faster_dtype_saving_frac": fp32 * (1 - 1 / fp32_ratio) if fp32_ratio and fp32_ratio > 1 else 0.0}
