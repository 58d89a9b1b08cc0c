"""Why an experiment's interval decided nothing: what the timed windows of its runs and the baseline's show. An
interval too wide to tell a 2x gain from a 2x loss (stats.UNDECIDED_WIDTH) is a verdict of its own, and the user
needs the cause they can act on: a model that recompiled or compiled inside the windows timed different code from
window to window; epoch start-ups inside the timed span add their time, amortised, run by run; else the windows'
own spread says the machine was noisy. Only what the measurements recorded is read."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from diagnose.model import Measurement

RECOMPILES = "recompiles"  # torch.compile recompiled inside the timed windows (a guard failed: a new shape...)
COMPILING = "compiling"  # it compiled inside them (a frame first met there), no recompilation
EPOCH_RESTARTS = "epoch-restarts"  # an epoch's start-up fell inside the timed span
NOISY_MACHINE = "noisy-machine"  # none of those: the windows' and runs' own spread
CAUSES = (RECOMPILES, COMPILING, EPOCH_RESTARTS, NOISY_MACHINE)  # in the order they are looked for


@dataclass(frozen=True)
class Cause:
    cause: str  # one of CAUSES
    detail: str  # what the windows showed, in words and numbers (the experiment's reason)


def undecided_cause(baseline: Sequence[Measurement], variant: Sequence[Measurement]) -> Cause:
    """The first cause the runs' timed windows show, of CAUSES; `baseline` and `variant`: their timed runs."""
    runs = list(baseline) + list(variant)
    recompiles = [sum(w.recompiles for w in m.windows) for m in runs]
    if any(recompiles):
        return Cause(RECOMPILES, f"torch.compile recompiled inside the timed windows: {sum(recompiles)} "
                                 f"recompilation{_s(sum(recompiles))} in {_runs(baseline, variant, _recompiled)}; "
                                 "the windows timed different compiled code")
    compile_s = [sum(w.compile_s for w in m.windows) for m in runs]
    if any(compile_s) or any(w.compiled_steps for m in runs for w in m.windows):
        return Cause(COMPILING, f"torch.compile compiled inside the timed windows: {sum(compile_s):.1f} s in "
                                f"{_runs(baseline, variant, _compiled)}; the steps after a compilation run "
                                "differently from those before")
    if any(_restarted(m) for m in runs):
        return Cause(EPOCH_RESTARTS, f"epoch start-ups fell inside the timed span of "
                                     f"{_runs(baseline, variant, _restarted)}; their time, amortised over the epoch, "
                                     "varies from run to run")
    return Cause(NOISY_MACHINE, f"no compilation or epoch start-up inside the timed windows: the machine was noisy "
                                f"({_spread_text(baseline, variant)})")


def _recompiled(m: Measurement) -> bool:
    return any(w.recompiles for w in m.windows)


def _compiled(m: Measurement) -> bool:
    return any(w.compile_s or w.compiled_steps for w in m.windows)


def _restarted(m: Measurement) -> bool:
    """Steps of the timed span that no window holds (an epoch's start-up, or the part of a window it cut short, lay
    between two windows), or windows of whole epochs that hold their start-ups."""
    return any(w.restarts_included or (w.wall_steps is not None and w.wall_steps > w.steps) for w in m.windows)


def _runs(baseline: Sequence[Measurement], variant: Sequence[Measurement], shows) -> str:
    """'2 of the baseline's 3 runs and 1 of the variant's 2', leaving out a side where none shows it."""
    parts = [f"{sum(1 for m in runs if shows(m))} of the {side}'s {len(runs)} run{_s(len(runs))}"
             for side, runs in (("baseline", baseline), ("variant", variant)) if any(shows(m) for m in runs)]
    return " and ".join(parts)


def window_spread(m: Measurement) -> float:
    """How far one run's windows' step rates lie apart: the fastest over the slowest, less one (0 with one)."""
    rates = [w.steps / w.seconds for w in m.windows if w.steps > 0 and w.seconds > 0]
    return max(rates) / min(rates) - 1 if rates else 0.0


def run_spread(runs: Sequence[Measurement]) -> float:
    """How far the runs' step rates (all their windows together) lie apart: the fastest over the slowest, less one."""
    rates = [sum(w.steps for w in m.windows) / seconds for m in runs
             if (seconds := sum(w.seconds for w in m.windows)) > 0]
    return max(rates) / min(rates) - 1 if rates else 0.0


def _spread_text(baseline: Sequence[Measurement], variant: Sequence[Measurement]) -> str:
    windows = max((window_spread(m) for m in (*baseline, *variant)), default=0.0)
    runs = max(run_spread(baseline), run_spread(variant))
    return (f"one run's windows lay up to {windows:.0%} apart in step rate, the runs of one side up to {runs:.0%}; "
            f"{len(baseline)} runs of the baseline and {len(variant)} of the variant")


def _s(n: int) -> str:
    return "" if n == 1 else "s"
