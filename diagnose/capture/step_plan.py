"""The capture's step plan and phase: how many steps warm up, are timed without the profiler and are profiled, and
how many fewer when steps are long against --max-seconds. Pure arithmetic on counts and seconds: no clock, no
torch, no process (tests/test_step_plan.py); capture/session.py runs the plan, plain_timer.py times its steps."""
from __future__ import annotations

import math
from dataclasses import dataclass
from enum import Enum
from typing import Optional

from diagnose.capture.bursts import Bursts


class Phase(Enum):
    """Where the capture session stands; the value is the word of its progress lines (`step N PLANNED PHASE`)."""
    WARM_UP = "warm-up"
    TIMED = "timing"  # steps timed without the profiler, before it has ever started
    PROFILED = "profiling"
    STOPPING = "stopping"  # the profiler has stopped: the trace is written, the script stops


# Long steps (fit_to_time): a profiled step costs about twice a plain one; the warm-up, timed and profiled steps
# get this share of the time left (the rest: exporting the trace, the files); at least this many profiled steps.
PROFILED_COST = 2
FIT_SHARE = 0.8
MIN_PROFILED = 2
# Steps timed without the profiler before it starts: as many as are profiled (MIN_TIMED at least; whole loader
# bursts). A quarter once: 5 steps of a 20 ms step moved 21% between two runs of one script, and compare's
# verdicts rest on this timing; cut in blocks it also measures how far the run's own step time moves.
# A script that ends inside it runs again with the steps that fit.
TIMED_SHARE = 1
MIN_TIMED = 3
# After a new epoch's first step, its workers' first batches: left out of the timing, as warm-up steps are.
REWARM_STEPS = 2


@dataclass(frozen=True)
class Feed:
    """The training loader's pace: N workers deliver N batches at a time (a burst), and fill their queue
    (prefetch_factor x N batches, the backlog) while a slow step runs."""
    workers: int = 0
    prefetch_factor: Optional[int] = None

    @property
    def burst(self) -> int:
        return max(1, self.workers)

    @property
    def backlog(self) -> int:
        return self.workers * (self.prefetch_factor or 2) if self.workers else 0


def timed_steps(profiled: int) -> int:
    """Steps to time without the profiler for `profiled` profiled ones."""
    return max(MIN_TIMED, -(-profiled // TIMED_SHARE))


def least_timed(burst: int) -> int:
    """The fewest steps a plain timing closes with: MIN_TIMED, two bursts at least."""
    return max(MIN_TIMED, 2 * burst if burst > 1 else 0)


def timed_target(steps: int, burst: int = 1) -> int:
    """Steps in a plain timing of `steps` asked: whole bursts, two at least, MIN_TIMED at least."""
    return Bursts(size=burst).rounded_up(max(steps, least_timed(burst)))


def plain_bursts(steps: int, burst: int, budget_s: Optional[float]) -> Bursts:
    """How a plain timing of `steps` steps closes: at its target, or once it has lasted `budget_s` (None: on the
    count alone); cut short by an epoch's end, it keeps MIN_TIMED whole-burst steps at least."""
    return Bursts(size=burst, least=least_timed(burst), most=timed_target(steps, burst), seconds=budget_s,
                  least_cut=MIN_TIMED)


def timed_length(timed: int, warmup: int, feed: Feed) -> int:
    """Steps a plain timing of `timed` steps takes, when no epoch ends inside it: its re-warm-up (without warm-up
    the first step is instrumented, its memory measured: not timed), the loader's backlog and whole bursts (0:
    not timed)."""
    if not timed:
        return 0
    return int(warmup == 0) + feed.backlog + timed_target(timed, feed.burst)


@dataclass(frozen=True)
class StepPlan:
    """The warm-up, timed and profiled steps, as the session runs them: fewer than asked when steps are long."""
    warmup: int
    timed: int  # steps timed without the profiler before it starts (0: none)
    profiled: int

    def planned_steps(self, feed: Feed) -> int:
        return self.warmup + timed_length(self.timed, self.warmup, feed) + self.profiled


def plan_steps(warmup: int, profiled: int) -> StepPlan:
    """The plan the options ask for: `warmup` warm-up steps, `profiled` profiled ones and as many timed before."""
    return StepPlan(warmup=warmup, timed=timed_steps(profiled), profiled=profiled)


def room_steps(max_seconds: float, measured_s: float, step_s: float) -> int:
    """Steps of `step_s` that fit in the share of --max-seconds left after `measured_s`."""
    return int(FIT_SHARE * (max_seconds - measured_s) / step_s)


def fit_to_time(plan: StepPlan, feed: Feed, step: int, room: int) -> Optional[StepPlan]:
    """At boundary `step` (a warm-up one), with `room` steps left: None when the rest of the warm-up, the timed
    steps and the profiled steps (PROFILED_COST each) fit, else fewer of each, MIN_PROFILED profiled at least.
    Profiling may start now; time left over goes to profiled steps first (a script with long steps may end soon),
    then to timed steps (MIN_TIMED at least, else none), then to warm-up."""
    if (plan.warmup - step) + timed_length(plan.timed, plan.warmup, feed) + PROFILED_COST * plan.profiled <= room:
        return None
    profiled = min(plan.profiled, max(MIN_PROFILED, room // PROFILED_COST))
    left = max(0, room - PROFILED_COST * profiled)
    timed = next((t for t in (timed_steps(profiled), MIN_TIMED) if timed_length(t, step, feed) <= left), 0)
    spare = left - timed_length(timed, step, feed) if profiled == plan.profiled else 0
    return StepPlan(warmup=step + max(0, min(plan.warmup - step, spare)), timed=timed, profiled=profiled)


def fits(plan: StepPlan, step: int, room: int) -> bool:
    """Whether the rest of the warm-up and the profiled steps of a fitted plan fit `room` (else the run's note
    gives the options that would)."""
    return (plan.warmup - step) + PROFILED_COST * plan.profiled <= room


def steps_that_fit(seen: int, feed: Feed) -> int:
    """The most --steps that `--warmup 1` leaves room for in a script of `seen` step boundaries: the warm-up
    step, the timed steps, the profiled steps and the boundary that ends the last of them (0: none)."""
    return next((steps for steps in range(seen, 0, -1)
                 if 1 + timed_length(timed_steps(steps), 1, feed) + steps + 1 <= seen), 0)


def options_that_fit(step_s: float, startup_s: float) -> str:
    """A warm-up step, MIN_TIMED timed ones, MIN_PROFILED profiled ones at PROFILED_COST, one more for the trace
    (and `startup_s`, when --max-seconds counts it), rounded up to 10 s."""
    steps = 1 + MIN_TIMED + PROFILED_COST * MIN_PROFILED + 1
    steps_s = steps * step_s / FIT_SHARE  # as fit_to_time counts the room
    seconds = math.ceil((startup_s + steps_s) / 10) * 10
    return f"--warmup 1 --steps {MIN_PROFILED} --max-seconds {seconds}"
