"""Steps timed as the user runs them, the profiler off, before it has ever started (capture.json
`unprofiled_window`): the step time every report states. The step plan (step_plan.py) says how many."""
from __future__ import annotations

import time
from typing import Optional

from diagnose.capture.device import sync_device
from diagnose.capture.energy import EnergyMeter
from diagnose.capture.step_plan import REWARM_STEPS, plain_bursts
from diagnose.model import PlainTiming


class PlainTimer:
    """Times steps with the profiler off, before it starts. The device is synchronised at the timing's edges only:
    a sync per step would serialise host and GPU and change what is measured. The timing closes after `steps`
    steps, or once it has lasted `budget_s` (MIN_TIMED at least).

    With N loader workers batches arrive N at a time, so the timing holds whole bursts of N steps (any N
    consecutive steady steps span one worker period). And while a slow step ran (memory measured, FLOPs counted,
    a new epoch's start) the workers filled their queue (prefetch_factor x N batches): the steps served from that
    backlog run faster than the loader can feed them (8 workers at one batch per 8 ms read as 4.6 ms per step), so
    they are left out, with `rewarm_steps`. A step that waits for its batch does not mean the backlog is gone:
    batches come in order, and the next may be a slow worker's while the others' are ready."""

    def __init__(self, steps: int, budget_s: Optional[float], rewarm_steps: int = REWARM_STEPS, burst: int = 1,
                 backlog: int = 0, meter: Optional[EnergyMeter] = None, step_compiled=lambda: False):
        self.meter = meter  # the energy counters, read at the timing's edges as its clock is
        # whether the step that just ended compiled (a new input size): such a step is left out of the timing,
        # its whole time (the compiling, and the first run of what it compiled), so the step time is the steady one
        self.step_compiled, self.left_out_s = step_compiled, 0.0
        self.bursts = plain_bursts(steps, burst, budget_s)  # budget_s None: on the step count alone
        self.backlog = backlog
        self.rewarm_left = rewarm_steps + backlog
        self.start: Optional[float] = None
        self.steps = 0
        self.step_ends: list[float] = []
        # epochs that end inside the timing restart it: past twice its planned length the timing is given up
        self.seen, self.most = 0, 2 * (rewarm_steps + backlog + self.bursts.most)
        self._begin_when_warm()

    @property
    def given_up(self) -> bool:
        return self.seen >= self.most

    def boundary(self) -> Optional[PlainTiming]:
        """One more step done (a new one starts now): the timing, once it closes, else None."""
        self.seen += 1
        if self.start is None:
            self.rewarm_left -= 1
            self._begin_when_warm()
            return None
        elapsed = time.perf_counter() - self.start - self.left_out_s
        if self.step_compiled():
            self.left_out_s += elapsed - (self.step_ends[-1] if self.step_ends else 0.0)
            return None
        self.steps += 1
        self.step_ends.append(elapsed)
        return self._timing(self.steps) if self.bursts.closes(self.steps, elapsed) else None

    def epoch_started(self) -> Optional[PlainTiming]:
        """The epoch ended inside the timing: the steps so far are the timing when there are enough whole bursts
        (the epoch's last step has just finished), else timing starts again after the new epoch's first steps
        (and the new workers' backlog)."""
        steps = self.steps + 1
        if self.start is not None and self.bursts.keeps_cut(steps):
            self.step_ends.append(time.perf_counter() - self.start - self.left_out_s)
            return self._timing(steps)
        self.start, self.steps, self.rewarm_left = None, 0, REWARM_STEPS + self.backlog
        return None

    def _timing(self, steps: int) -> PlainTiming:
        synced = sync_device()
        seconds = time.perf_counter() - self.start - self.left_out_s
        if self.meter is not None:
            self.meter.stop(steps)
        # the last step's end as the synchronised clock saw it: queued device work counts in the last block
        ends = (*self.step_ends[:steps - 1], seconds)
        return PlainTiming(steps=steps, seconds=seconds, device_synced=synced, step_ends_s=ends, burst=self.bursts.size)

    def _begin_when_warm(self) -> None:
        if self.rewarm_left <= 0:
            sync_device()
            self.start = time.perf_counter()
            self.left_out_s = 0.0
            self.step_ends = []
            if self.meter is not None:
                self.meter.start()
