"""Steps timed in whole loader bursts: the one rule the capture's plain timing (session.PlainTimer) and the
experiments' timed runs (experiments/measure.py) close their timings by.

With N loader workers batches arrive N at a time, so a timing holds whole bursts of N steps (any N consecutive
steady steps span one worker period); a timing of a part of a burst would time the quick steps served from the
burst's batches without the slow one that waited for it. A timing closes at a whole burst once it holds `least`
steps and has lasted `seconds` (or holds `most` steps, whatever its time); one cut short (an epoch's end) keeps
its steps only when they are whole bursts, `least_cut` at least. Pure arithmetic: the clock and the device's
synchronisation stay with the callers."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional


@dataclass(frozen=True)
class Bursts:
    size: int = 1  # loader workers: batches arrive this many at a time
    least: int = 1  # a timing closes with this many steps at least
    most: int = 1  # ...and closes here whatever its time
    seconds: Optional[float] = None  # ...or once it has lasted this long (None: on the step count alone)
    least_cut: int = 1  # a timing cut short keeps this many steps at least

    def __post_init__(self):
        object.__setattr__(self, "size", max(1, self.size))

    def is_whole(self, steps: int) -> bool:
        return steps % self.size == 0

    def whole(self, steps: int) -> int:
        """`steps` rounded down to whole bursts."""
        return steps // self.size * self.size

    def rounded_up(self, steps: int) -> int:
        """`steps` rounded up to whole bursts."""
        return -(-steps // self.size) * self.size

    def closes(self, steps: int, elapsed_s: float) -> bool:
        """Whether a timing of `steps` steps that has lasted `elapsed_s` closes now."""
        return self.is_whole(steps) and steps >= self.least and (
            steps >= self.most or (self.seconds is not None and elapsed_s >= self.seconds))

    def keeps_cut(self, steps: int) -> bool:
        """Whether a timing cut short after `steps` steps is kept: whole bursts, `least_cut` at least."""
        return self.is_whole(steps) and steps >= self.least_cut
