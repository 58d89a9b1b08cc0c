"""B's step time over A's, with an interval honest about two separate processes, possibly hours apart.

Each side's mean step time has its own spread (the spread between its steps, over the steps timed), and the two
runs differ by more than that: other load, clocks, where the process and its memory landed. That run-to-run part
is measured where the runs allow it: by their repeated baseline runs (their experiments), and by the blocks of
their unprofiled windows (each window cut in blocks of whole bursts, each block's step time its own sample). A
user who measured their own machine's spread (a dedicated CI runner) can state it (--run-noise): the larger of
what was stated and what the runs measured counts. Where nothing measured it, a documented default measured on
real runs stands in, and the comparison says so."""
from __future__ import annotations

import math
from typing import Optional

from diagnose.experiments.stats import t_quantile
from diagnose.model import CompareSide, GateResult, StepChange, Verdict

# Run-to-run spread of log step time per run where no run measured it (traces; windows too short to cut into
# blocks). Measured: see RUN_NOISE_DEFAULT_SOURCE. Never the 5% once assumed here: two runs of one script 5 steps
# each moved 21% apart, and a 99% interval built on 5% excluded a 2x ratio measured by interleaved plain runs.
RUN_NOISE_DEFAULT_SD = 0.10
RUN_NOISE_DEFAULT_SOURCE = "benchmarks/run_noise.py"
# Under this the blocks of one window are not believed as the spread between runs: what moves a whole run (where
# its memory landed, other load that came and went) does not show inside its window.
RUN_NOISE_FLOOR_SD = 0.03


def step_change(a: CompareSide, b: CompareSide, stated_noise_sd: Optional[float] = None) -> StepChange:
    """stated_noise_sd: the run-to-run spread the user measured on their machine (--run-noise), used unless the
    runs' own blocks measured more."""
    run_sd, run_df, source = run_noise(a, b, stated_noise_sd)
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


def run_noise(a: CompareSide, b: CompareSide, stated_sd: Optional[float]) -> tuple[float, float, str]:
    """Run-to-run spread per run, its degrees of freedom and where it came from: the largest of what the runs
    measured (their repeated baseline runs; the blocks of their timed windows) and what the user stated; without
    either, the documented default. A measured spread has the degrees of freedom of its repeats."""
    measured = [(s.run_noise_sd, s.run_noise_runs - 1, "measured") for s in (a, b) if s.run_noise_sd is not None]
    measured += [(s.block_noise_sd, s.blocks - 1, "blocks") for s in (a, b) if s.block_noise_sd is not None]
    if stated_sd is not None:
        measured.append((stated_sd, math.inf, "stated"))
    if not measured:
        return RUN_NOISE_DEFAULT_SD, math.inf, "assumed"
    sd, df, source = max(measured, key=lambda m: m[0])
    if sd < RUN_NOISE_FLOOR_SD and source != "stated":
        return RUN_NOISE_FLOOR_SD, math.inf, source
    return sd, max(df, 1), source


def gate_needs(allowed_slowdown_pct: float, confidence_t: float = 2.58) -> float:
    """The run-to-run spread per run (log scale) under which a run twice as slow as allowed fails the gate: its
    interval's fast end, 2 x allowed less t x sqrt(2) x spread (99%: t = 2.58), must stay past the allowance."""
    return math.log(1 + allowed_slowdown_pct / 100) / (confidence_t * math.sqrt(2))


def gate(step: StepChange, allowed_slowdown_pct: float) -> GateResult:
    """B fails when even the fast end of the interval is more than allowed_slowdown_pct slower than A."""
    low_pct = (step.ci[0] - 1) * 100
    half = math.log(step.ci[1] / step.ratio)
    fails_above_pct = ((1 + allowed_slowdown_pct / 100) * math.exp(half) - 1) * 100
    return GateResult(allowed_slowdown_pct, low_pct > allowed_slowdown_pct, low_pct, fails_above_pct,
                      step.run_noise_sd, gate_needs(allowed_slowdown_pct))
