"""Comparing throughputs honestly: the ratio of geometric-mean throughputs with a 99% confidence interval on
the log throughput of each run (one value per process, never per window: windows of one process are not
independent). 'no-change' when the interval includes 1.0; 'undecided' when it includes 1.0 and is too wide to
tell a 2x gain from a 2x loss (its ends UNDECIDED_WIDTH apart or more): it decides nothing.

Run-to-run noise is mostly the machine's, the same for every setting on the log scale, so it is estimated from
all the experiments' runs together (the pooled within-setting variance, with its degrees of freedom): a setting
with two runs and a large effect is then decided, where its own two runs alone (one degree of freedom, t = 64)
could not decide even a 7x effect. Neither side's variance is taken below its own sample variance, so a setting
noisier than the rest is not judged by the others' calm."""
from __future__ import annotations

import math
from typing import Sequence

from diagnose.lean_dataclass import dataclass
from diagnose.model import Verdict

# two-sided 99% Student t quantiles (0.995) for 1..30 degrees of freedom; beyond, a conservative 2.75
T_995 = (63.657, 9.925, 5.841, 4.604, 4.032, 3.707, 3.499, 3.355, 3.250, 3.169, 3.106, 3.055, 3.012, 2.977,
         2.947, 2.921, 2.898, 2.878, 2.861, 2.845, 2.831, 2.819, 2.807, 2.797, 2.787, 2.779, 2.771, 2.763,
         2.756, 2.750)

UNDECIDED_WIDTH = 4.0  # an interval whose ends are this far apart cannot tell a 2x gain from a 2x loss


@dataclass(frozen=True)
class Comparison:
    speedup: float
    ci: tuple[float, float]
    verdict: str  # faster | slower | no-change | undecided


def geometric_mean(values: Sequence[float]) -> float:
    """The mean on the log scale, where run-to-run noise is alike for every setting; 0.0 with no values."""
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else 0.0


def t_quantile(df: float) -> float:
    if df < 1:
        return T_995[0]
    return T_995[min(int(df), len(T_995)) - 1] if df <= len(T_995) else 2.75


def _mean_var(values: Sequence[float]) -> tuple[float, float]:
    n = len(values)
    mean = sum(values) / n
    var = sum((v - mean) ** 2 for v in values) / (n - 1) if n > 1 else 0.0
    return mean, var


@dataclass(frozen=True)
class Noise:
    """Run-to-run variance of log throughput, pooled over settings, and its degrees of freedom."""
    variance: float
    df: int


def pooled_noise(groups: Sequence[Sequence[float]]) -> Noise | None:
    """Pooled within-group variance of the log throughputs of each setting's runs (groups of one add nothing)."""
    squares, df = 0.0, 0
    for values in groups:
        if len(values) >= 2:
            logs = [math.log(v) for v in values]
            mean = sum(logs) / len(logs)
            squares += sum((x - mean) ** 2 for x in logs)
            df += len(logs) - 1
    return Noise(squares / df, df) if df else None


def compare(baseline: Sequence[float], variant: Sequence[float], noise: Noise | None = None) -> Comparison:
    """Throughputs (higher is better), one per run; needs at least two runs on each side. With `noise` pooled
    from all the experiments' runs, the interval uses its degrees of freedom."""
    if len(baseline) < 2 or len(variant) < 2:
        raise ValueError("need at least two runs on each side")
    if noise is not None:
        return _pooled(baseline, variant, noise)
    lb, lv = [math.log(x) for x in baseline], [math.log(x) for x in variant]
    (mb, vb), (mv, vv) = _mean_var(lb), _mean_var(lv)
    se2 = vb / len(lb) + vv / len(lv)
    diff = mv - mb
    if se2 == 0:
        return Comparison(math.exp(diff), (math.exp(diff), math.exp(diff)), _verdict(diff, diff))
    df = se2 ** 2 / ((vb / len(lb)) ** 2 / max(len(lb) - 1, 1) + (vv / len(lv)) ** 2 / max(len(lv) - 1, 1))
    half = t_quantile(df) * math.sqrt(se2)
    return Comparison(math.exp(diff), (math.exp(diff - half), math.exp(diff + half)),
                      _verdict(diff - half, diff + half))


def _pooled(baseline: Sequence[float], variant: Sequence[float], noise: Noise) -> Comparison:
    lb, lv = [math.log(x) for x in baseline], [math.log(x) for x in variant]
    (mb, vb), (mv, vv) = _mean_var(lb), _mean_var(lv)
    se = math.sqrt(max(noise.variance, vb) / len(lb) + max(noise.variance, vv) / len(lv))
    diff = mv - mb
    half = t_quantile(noise.df) * se
    return Comparison(math.exp(diff), (math.exp(diff - half), math.exp(diff + half)),
                      _verdict(diff - half, diff + half))


def throughput_interval(values: Sequence[float], noise: Noise | None) -> tuple[float, tuple[float, float]] | None:
    """The geometric mean of one setting's throughputs with its 99% interval, from the noise pooled over the
    settings (never below the setting's own variance); None with fewer than two runs."""
    if len(values) < 2:
        return None
    logs = [math.log(v) for v in values]
    mean, var = _mean_var(logs)
    variance, df = (max(noise.variance, var), noise.df) if noise is not None else (var, len(logs) - 1)
    half = t_quantile(df) * math.sqrt(variance / len(logs))
    return math.exp(mean), (math.exp(mean - half), math.exp(mean + half))


def _verdict(lo: float, hi: float) -> str:
    """From the log interval of the speedup."""
    if lo > 0:
        return Verdict.FASTER
    if hi < 0:
        return Verdict.SLOWER
    return Verdict.UNDECIDED if hi - lo >= math.log(UNDECIDED_WIDTH) else Verdict.NO_CHANGE


def loss_drift(baseline: Sequence[float], variant: Sequence[float]) -> float | None:
    """Mean absolute difference of the per-step losses over the steps both runs made, relative to the
    baseline's mean absolute loss (0 = identical); None where the baseline's losses are not all finite (a run that
    is not training: nothing to compare against)."""
    n = min(len(baseline), len(variant))
    if n == 0 or not all(math.isfinite(x) for x in baseline[:n]):
        return None
    scale = sum(abs(x) for x in baseline[:n]) / n
    diff = sum(abs(a - b) for a, b in zip(baseline[:n], variant[:n])) / n
    if not math.isfinite(diff):
        return float("inf")
    return diff / scale if scale > 0 else diff
