"""How far a step is from what the device can do: the step's FLOPs over its time against the device's peak in the
dtype the step computes in (MFU), and against the best dtype the device offers; the speed-of-light step is the
step's FLOPs at that best peak. Peaks measured on this machine are preferred; a datasheet's dense figure
stands in where none was measured (a trace from another machine)."""
from __future__ import annotations

from typing import Optional

from diagnose.model import FlopCount, Peak, SpeedOfLight

# dtypes a training step can switch to by a setting (autocast, TF32); float64 and float8 are not such a switch
TRAINING_DTYPES = ("float32", "tf32", "bfloat16", "float16")


def speed_of_light(flops: Optional[FlopCount], step_s: Optional[float], peaks: tuple[Peak, ...],
                   cross_check: Optional[FlopCount] = None,
                   busy_frac: Optional[float] = None) -> Optional[SpeedOfLight]:
    if flops is None or not flops.per_step or not step_s:
        return None
    dtype = max(flops.by_dtype, key=flops.by_dtype.get) if flops.by_dtype else "unknown"
    achieved = flops.per_step / step_s
    chosen = _preferred(peaks)
    peak = chosen.get(dtype)
    best = max((chosen[d] for d in TRAINING_DTYPES if d in chosen), key=lambda p: p.per_s, default=None)
    return SpeedOfLight(
        flops=flops, step_s=step_s, achieved_flops_s=achieved, dtype=dtype, peak=peak,
        mfu=achieved / peak.per_s if peak else None, best=best,
        mfu_best=achieved / best.per_s if best else None,
        light_step_s=flops.per_step / best.per_s if best else None,
        cross_check=cross_check, peaks=peaks, busy_frac=busy_frac,
        mfu_while_busy=achieved / busy_frac / peak.per_s if peak and busy_frac else None)


def _preferred(peaks: tuple[Peak, ...]) -> dict[str, Peak]:
    """One peak per dtype: measured on this machine where there is one, else the datasheet's."""
    chosen: dict[str, Peak] = {}
    for peak in sorted(peaks, key=lambda p: p.source.startswith("measured")):
        chosen[peak.dtype] = peak
    return chosen


def speed_metrics(light: Optional[SpeedOfLight]) -> dict[str, Optional[float]]:
    if light is None:
        return {"mfu": None, "mfu_best_dtype": None, "flops_per_step": None, "achieved_flops_s": None,
                "best_dtype_speedup": None}
    ratio = light.best.per_s / light.peak.per_s if light.best and light.peak else None
    return {"mfu": light.mfu, "mfu_best_dtype": light.mfu_best, "flops_per_step": light.flops.per_step,
            "achieved_flops_s": light.achieved_flops_s, "best_dtype_speedup": ratio}
