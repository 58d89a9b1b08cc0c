"""B's step time over A's, with an interval honest about two separate processes, possibly hours apart.

Each side's mean step time has its own spread (the spread between its steps, over the steps timed), and the two
runs differ by more than that: other load, clocks, where the process and its memory landed. That run-to-run part
cannot be seen in one run; it is taken from the runs' repeated baseline runs (their experiments) when there are
some, and never below RUN_NOISE_FLOOR_SD, so two quiet runs do not claim a precision no pair of runs has."""
from __future__ import annotations

import math

from diagnose.experiments.stats import t_quantile
from diagnose.model import CompareSide, GateResult, StepChange

# Run-to-run spread of log step time assumed per run at least. Measured here: two runs of sample_runs/slow_loader.py
# minutes apart on a 2-core machine, one of them beside a test suite, took 75.5 and 87.7 ms per step (16% apart);
# repeated baseline runs in one quiet session spread by 1-3%. 5% per run makes a re-run read as "no change".
RUN_NOISE_FLOOR_SD = 0.05


def step_change(a: CompareSide, b: CompareSide) -> StepChange:
    measured = [s.run_noise_sd for s in (a, b) if s.run_noise_sd is not None]
    run_sd = max([RUN_NOISE_FLOOR_SD, *measured])
    source = "measured" if measured and max(measured) > RUN_NOISE_FLOOR_SD else "assumed"
    within = [(s.step_cv ** 2 / max(s.steps, 1), max(s.steps - 1, 1)) for s in (a, b)]  # var of log mean
    variance = sum(v for v, _ in within) + 2 * run_sd ** 2
    # Welch-Satterthwaite degrees of freedom; the run-to-run part is taken as known (infinite df)
    spread = sum(v ** 2 / df for v, df in within)
    df = variance ** 2 / spread if spread > 0 else math.inf
    half = t_quantile(df) * math.sqrt(variance)
    diff = math.log(b.step_s) - math.log(a.step_s)
    verdict = "slower" if diff - half > 0 else "faster" if diff + half < 0 else "no-change"
    return StepChange(math.exp(diff), (math.exp(diff - half), math.exp(diff + half)), verdict, a.step_basis, run_sd,
                      source)


def gate(step: StepChange, allowed_slowdown_pct: float) -> GateResult:
    """B fails when even the fast end of the interval is more than allowed_slowdown_pct slower than A."""
    low_pct = (step.ci[0] - 1) * 100
    return GateResult(allowed_slowdown_pct, low_pct > allowed_slowdown_pct, low_pct)
