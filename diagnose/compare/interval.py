"""B's step time over A's, with an interval honest about two separate processes, possibly hours apart.

Each side's mean step time has its own spread (the spread between its steps, over the steps timed), and the two
runs differ by more than that: other load, clocks, where the process and its memory landed. That run-to-run part
is measured where the runs allow it: by their repeated baseline runs (their experiments), and by the blocks of
their unprofiled windows (each window cut in blocks of whole bursts, each block's step time its own sample). A
user who measured their own machine's spread (a dedicated CI runner) can state it (--run-noise): for each run the
larger of what was stated and what the run measured counts. Where nothing measured it, a documented default
measured on real runs stands in, and the comparison says so."""
from __future__ import annotations

import math
from typing import Optional

from diagnose.model import CompareSide, GateResult, StepChange, Verdict
from diagnose.verdict.stats import t_quantile

# Run-to-run spread of log step time per run where no run measured it (traces; windows too short to cut into
# blocks). Measured with RUN_NOISE_DEFAULT_SOURCE: five runs of tests/scripts/calibration_mlp.py on a quiet 2-core
# machine spread 5.1% (std of log); two runs of the same MLP 5 steps each once moved 21% apart (about 14% a run),
# and a 99% interval built on the 5% once assumed here excluded a 2x ratio measured by interleaved plain runs.
RUN_NOISE_DEFAULT_SD = 0.10
RUN_NOISE_DEFAULT_SOURCE = "benchmarks/run_noise.py"
# Under this the blocks of one window are not believed as the spread between runs: what moves a whole run (where
# its memory landed, other load that came and went) does not show inside its window.
RUN_NOISE_FLOOR_SD = 0.03


def step_change(a: CompareSide, b: CompareSide, stated_noise_sd: Optional[float] = None) -> StepChange:
    """stated_noise_sd: the run-to-run spread the user measured on their machine (--run-noise), used for a side
    unless that run measured more itself."""
    noises = [side_noise(s, stated_noise_sd) for s in (a, b)]
    parts = [(s.step_cv ** 2 / max(s.steps, 1), max(s.steps - 1, 1)) for s in (a, b)]  # var of log mean, df
    parts += [(sd ** 2, df) for sd, df, _ in noises]
    variance = sum(v for v, _ in parts)
    spread = sum(v ** 2 / df for v, df in parts if math.isfinite(df))  # Welch-Satterthwaite
    df = variance ** 2 / spread if spread > 0 else math.inf
    t = t_quantile(df)
    half = t * math.sqrt(variance)
    if a.step_s <= 0 or b.step_s <= 0:
        raise ValueError("step times must be positive")  # the sides refuse such input before this
    diff = math.log(b.step_s) - math.log(a.step_s)
    verdict = Verdict.SLOWER if diff - half > 0 else Verdict.FASTER if diff + half < 0 else Verdict.NO_CHANGE
    per_run = math.sqrt(sum(sd ** 2 for sd, _, _ in noises) / 2)
    source = max(noises, key=lambda n: n[0])[2]
    return StepChange(math.exp(diff), (math.exp(diff - half), math.exp(diff + half)), verdict, a.step_basis,
                      per_run, source, t=t)


def side_noise(side: CompareSide, stated_sd: Optional[float]) -> tuple[float, float, str]:
    """One run's run-to-run spread (log scale), its degrees of freedom and where it came from: the larger of what
    the run measured (its repeated baseline runs, the blocks of its timed window) and what the user stated; a
    measured spread under RUN_NOISE_FLOOR_SD is raised to it unless a spread was stated; with neither, the
    documented default."""
    measured = []
    if side.run_noise_sd is not None:
        measured.append((side.run_noise_sd, max(side.run_noise_runs - 1, 1), "measured"))
    if side.block_noise_sd is not None:
        measured.append((side.block_noise_sd, max(side.blocks - 1, 1), "blocks"))
    own = max(measured, key=lambda m: m[0], default=None)
    if stated_sd is not None:
        return own if own is not None and own[0] > stated_sd else (stated_sd, math.inf, "stated")
    if own is None:
        return RUN_NOISE_DEFAULT_SD, math.inf, "assumed"
    return (RUN_NOISE_FLOOR_SD, own[1], "floor") if own[0] < RUN_NOISE_FLOOR_SD else own


def gate_needs(allowed_slowdown_pct: float, t: float) -> float:
    """The run-to-run spread per run (log scale) under which a run twice as slow as allowed fails the gate: its
    interval's fast end, 2 x allowed less t x sqrt(2) x spread, must stay past the allowance (t: the comparison's
    own quantile, 2.58 at 99% when the spreads are known well)."""
    return math.log(1 + allowed_slowdown_pct / 100) / (t * math.sqrt(2))


def gate(step: StepChange, allowed_slowdown_pct: float) -> GateResult:
    """B fails when even the fast end of the interval is more than allowed_slowdown_pct slower than A."""
    low_pct = (step.ci[0] - 1) * 100
    half = math.log(step.ci[1] / step.ratio)
    fails_above_pct = ((1 + allowed_slowdown_pct / 100) * math.exp(half) - 1) * 100
    return GateResult(allowed_slowdown_pct, low_pct > allowed_slowdown_pct, low_pct, fails_above_pct,
                      step.run_noise_sd, gate_needs(allowed_slowdown_pct, step.t))
