"""B's step time over A's, with an interval honest about two separate processes, possibly hours apart.

Each side's mean step time has its own spread (the spread between its steps, over the steps timed), and the two
runs differ by more than that: other load, clocks, where the process and its memory landed. That run-to-run part
cannot be seen in one run; it is taken from the runs' repeated baseline runs (their experiments) when there are
some, and never below RUN_NOISE_FLOOR_SD, so two quiet runs do not claim a precision no pair of runs has. A user
who measured their own machine's spread (a dedicated CI runner) can state it instead (--run-noise)."""
from __future__ import annotations

import math
from typing import Optional

from diagnose.experiments.stats import t_quantile
from diagnose.model import CompareSide, GateResult, StepChange, Verdict

# Run-to-run spread of log step time assumed per run at least. Measured here: two runs of sample_runs/slow_loader.py
# minutes apart on a 2-core machine, one of them beside a test suite, took 75.5 and 87.7 ms per step (16% apart);
# repeated baseline runs in one quiet session spread by 1-3%. 5% per run makes a re-run read as "no change".
RUN_NOISE_FLOOR_SD = 0.05


def step_change(a: CompareSide, b: CompareSide, stated_noise_sd: Optional[float] = None) -> StepChange:
    """stated_noise_sd: the run-to-run spread the user measured on their machine (--run-noise), used as it is."""
    run_sd, run_df, source = _run_noise(a, b, stated_noise_sd)
    parts = [(s.step_cv ** 2 / max(s.steps, 1), max(s.steps - 1, 1)) for s in (a, b)]  # var of log mean, df
    parts.append((2 * run_sd ** 2, run_df))
    variance = sum(v for v, _ in parts)
    spread = sum(v ** 2 / df for v, df in parts if math.isfinite(df))  # Welch-Satterthwaite
    df = variance ** 2 / spread if spread > 0 else math.inf
    half = t_quantile(df) * math.sqrt(variance)
    if a.step_s <= 0 or b.step_s <= 0:
        raise ValueError("step times must be positive")  # the sides refuse such input before this
    diff = math.log(b.step_s) - math.log(a.step_s)
    verdict = Verdict.SLOWER if diff - half > 0 else Verdict.FASTER if diff + half < 0 else Verdict.NO_CHANGE
    return StepChange(math.exp(diff), (math.exp(diff - half), math.exp(diff + half)), verdict, a.step_basis, run_sd,
                      source)


def _run_noise(a: CompareSide, b: CompareSide, stated_sd: Optional[float]) -> tuple[float, float, str]:
    """Run-to-run spread per run, its degrees of freedom and where it came from: stated by the user, measured by
    the runs' repeated baselines when that is more than the floor (few runs: few degrees of freedom), or the floor."""
    if stated_sd is not None:
        return stated_sd, math.inf, "stated"
    measured = [(s.run_noise_sd, s.run_noise_runs) for s in (a, b) if s.run_noise_sd is not None]
    if measured and max(measured)[0] > RUN_NOISE_FLOOR_SD:
        sd, runs = max(measured)
        return sd, max(runs - 1, 1), "measured"
    return RUN_NOISE_FLOOR_SD, math.inf, "assumed"


def gate(step: StepChange, allowed_slowdown_pct: float) -> GateResult:
    """B fails when even the fast end of the interval is more than allowed_slowdown_pct slower than A."""
    low_pct = (step.ci[0] - 1) * 100
    half = math.log(step.ci[1] / step.ratio)
    fails_above_pct = ((1 + allowed_slowdown_pct / 100) * math.exp(half) - 1) * 100
    return GateResult(allowed_slowdown_pct, low_pct > allowed_slowdown_pct, low_pct, fails_above_pct)
