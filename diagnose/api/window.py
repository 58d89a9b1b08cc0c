"""A profiled window inside a running training loop: N steps at a chosen step (or when a step runs slower than the
recent ones by a set fraction), traced with torch.profiler, analysed in a process of its own while training goes
on, into a run folder with the report. Used as `diagnose.window(...)` in a hand-written loop and by the Hugging
Face and Lightning callbacks.

Outside the window each step costs one clock read, a subtraction and a deque append (and, with `when_slower`, one
comparison against a median recomputed every MEDIAN_EVERY steps): the figure is in the README's callbacks section."""
from __future__ import annotations

import os
import statistics
import subprocess
import sys
import threading
import time
from collections import deque
from pathlib import Path
from typing import TYPE_CHECKING, Optional, Union

from diagnose.api.options import at_least
from diagnose.api.results import Result
from diagnose.errors import UserError
from diagnose.record.run_record import RunRecord

if TYPE_CHECKING:
    from diagnose.capture.profiled_window import ProfiledWindow

RECENT_STEPS = 64  # the running median of step time covers the last this many steps
MEDIAN_EVERY = 16  # recomputed every this many steps: a median of 64 floats costs microseconds, a step's share
LEAST_STEPS_FOR_MEDIAN = 20  # `when_slower` compares against a median of at least this many steps
# a slowdown is the median of the last this many steps over the running median: one step preempted by the OS (a
# 0.6 ms step of a tiny model took 18x its median on a loaded 2-core machine) is not one
SUSTAINED_STEPS = 5
RANKS_WAIT_S = 600.0  # rank 0 waits this long for the other ranks' traces before analysing those it has


class SlowdownWatch:
    """Each step's duration, from one boundary to the next, and whether the last SUSTAINED_STEPS ran slower than the
    running median by more than `when_slower` (a fraction: 0.5 is 50% slower). The boundaries are the loop's own
    step() calls; capture/instrument.py's StepBoundaries is what finds them in torch's calls under `diagnose run`."""

    def __init__(self, when_slower: Optional[float]):
        self.when_slower = when_slower
        self.recent: deque[float] = deque(maxlen=RECENT_STEPS)
        self.last_boundary: Optional[float] = None
        self.median: Optional[float] = None
        self.boundaries = 0

    def tick(self) -> bool:
        """A step boundary: True when the step that just ended crossed the slowdown threshold."""
        now = time.perf_counter()
        previous, self.last_boundary = self.last_boundary, now
        self.boundaries += 1
        if previous is None:
            return False
        self.recent.append(now - previous)
        slower = (self.when_slower is not None and self.median is not None
                  and self.latest_median() > self.median * (1.0 + self.when_slower))
        if self.boundaries % MEDIAN_EVERY == 0 and len(self.recent) >= LEAST_STEPS_FOR_MEDIAN:
            self.median = statistics.median(self.recent)
        return slower

    def latest_median(self) -> float:
        latest = sorted(self.recent[-i] for i in range(1, SUSTAINED_STEPS + 1))
        return latest[SUSTAINED_STEPS // 2]


class Window:
    """Profile `steps` steps of a training loop once: from step `at_step` (the loop's own step number when step()
    is given one, else the count of step() calls from 0), or from the step after one that ran `when_slower`
    slower than the running median. Call step() at the start of every step (a boundary)."""

    def __init__(self, at_step: Optional[int] = None, steps: int = 10, *, when_slower: Optional[float] = None,
                 out: Union[str, Path, None] = None, name: str = "", quiet: bool = False):
        if at_step is None and when_slower is None:
            raise UserError("diagnose.window needs at_step or when_slower",
                            "e.g. diagnose.window(at_step=200, steps=10) or diagnose.window(when_slower=0.5)")
        at_least("steps", steps, 1)
        if at_step is not None:
            at_least("at_step", at_step, 0)
        if when_slower is not None and when_slower <= 0:
            raise UserError(f"when_slower={when_slower}: must be a fraction above 0",
                            "e.g. when_slower=0.5 profiles after a step 50% slower than the running median")
        self.at_step, self.steps, self.quiet = at_step, steps, quiet
        self.rank, self.world = int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))
        self.out, self.name = out, name
        self.run_dir: Optional[Path] = None  # made when the window opens: a run that never reaches it leaves none
        self.folder = None  # the run folder's paths (its RunRecord's files), once the window opens
        self.slowdown = SlowdownWatch(when_slower)
        self.count = -1  # step() calls so far, less one: the number of the step that starts
        self.last_number: Optional[int] = None
        self.profiler: Optional["ProfiledWindow"] = None  # while the window is open
        self.profiled = 0  # steps begun inside the window
        self.first_step: Optional[int] = None
        self.done = False
        self.trigger = ""  # why the window opened: "at step 200" or "step 531 took 1.8x the median ..."
        self.analysis: Optional[threading.Thread] = None
        self.child: Optional[subprocess.Popen] = None

    def __enter__(self) -> "Window":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def step(self, number: Optional[int] = None) -> None:
        """A step begins. `number`: the loop's own step counter (e.g. a trainer's global step); calls that repeat the
        last number (micro-batches of one optimizer step) are not boundaries."""
        if self.done:
            return
        if number is not None:
            if number == self.last_number:
                return
            self.last_number = number
        self.count += 1
        current = self.count if number is None else number
        slower = self.slowdown.tick()
        if self.profiler is not None:
            self._advance(current)
        elif self._opens_at(current, slower):
            self._open(current)

    def close(self) -> None:
        """Training ended (or left the `with` block): a window still open keeps the steps it profiled."""
        if self.profiler is not None:
            self._finish()
        self.done = True

    def result(self, timeout: Optional[float] = None) -> Result:
        """Wait for the background analysis (on rank 0) and return its diagnosis."""
        if self.rank != 0 and self.run_dir is not None:
            raise UserError(f"rank {self.rank} wrote its trace; rank 0 writes the report into {self.run_dir}",
                            "call result() on rank 0, or diagnose.load(RUN_DIR) once its report is written")
        if self.analysis is None:
            raise UserError("no window was profiled yet",
                            f"the window opens at step {self.at_step}" if self.at_step is not None else
                            "the window opens after a step slower than the running median")
        self.analysis.join(timeout)
        if self.analysis.is_alive():
            raise TimeoutError(f"the analysis of {self.run_dir} is still running")
        if self.child is None or self.child.returncode not in (0, 3):
            raise UserError(f"the analysis of {self.run_dir} failed", f"see {self.folder.analysis_log}")
        return Result.load(self.run_dir)

    def _opens_at(self, current: int, slower: bool) -> bool:
        if self.at_step is not None and current >= self.at_step:
            self.trigger = f"at step {current}"
            return True
        if slower:
            watch = self.slowdown
            self.trigger = (f"after {SUSTAINED_STEPS} steps at {watch.latest_median() / watch.median:.1f}x "
                            f"the running median of {watch.median * 1e3:.1f} ms")
            return True
        return False

    def _open(self, current: int) -> None:
        from diagnose.capture.profiled_window import ProfiledWindow

        self.run_dir = _run_dir(self.out, self.name or _script_name(), self.at_step, self.world)
        self.folder = RunRecord(self.run_dir).files
        self.folder.tb.mkdir(parents=True, exist_ok=True)
        window = ProfiledWindow(self.folder.tb, f"rank{self.rank}")
        window.start()
        self.profiler, self.first_step, self.profiled = window, current, 1
        window.mark_step(current)
        self._say(f"profiling {self.steps} step(s) from step {current} ({self.trigger}) into {self.run_dir}")

    def _advance(self, current: int) -> None:
        if self.profiled >= self.steps:
            self._finish()
            self.done = True
            return
        self.profiler.mark_step(current)
        self.profiled += 1

    def _finish(self) -> None:
        profiler, self.profiler = self.profiler, None
        profiler.stop()  # writes RUN/tb/rank<R>.<...>.pt.trace.json
        self._say(f"profiled steps {self.first_step}-{self.first_step + self.profiled - 1}; "
                  + ("analysing in the background" if self.rank == 0 else "rank 0 writes the report"))
        if self.rank == 0:
            self.analysis = threading.Thread(target=self._analyse, name="diagnose-window-analysis", daemon=True)
            self.analysis.start()

    def _analyse(self) -> None:
        """Rank 0, off the training thread: wait for every rank's trace, then analyse them in a process of its own
        (no share of this one's interpreter lock), which writes the report into the run folder."""
        deadline = time.monotonic() + RANKS_WAIT_S
        while len(list(self.folder.tb.glob("rank*.json*"))) < self.world and time.monotonic() < deadline:
            time.sleep(0.5)
        command = [sys.executable, "-m", "diagnose.api.window_analysis", str(self.run_dir), _script_name()]
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).resolve().parents[2]),
                                                            os.environ.get("PYTHONPATH", "")])}
        with open(self.folder.analysis_log, "w") as log:
            self.child = subprocess.Popen(command, stdout=log, stderr=log, env=env, stdin=subprocess.DEVNULL)
            self.child.wait()
        if self.child.returncode in (0, 3):
            self._say(f"report: {self.folder.report}")

    def _say(self, text: str) -> None:
        if not self.quiet:
            print(f"diagnose: {text}", file=sys.stderr, flush=True)


def window(at_step: Optional[int] = None, steps: int = 10, *, when_slower: Optional[float] = None,
           out: Union[str, Path, None] = None, name: str = "", quiet: bool = False) -> Window:
    """A profiled window for a hand-written loop:

        with diagnose.window(at_step=200, steps=10) as w:
            for batch in loader:
                w.step()
                ...
        print(w.result())
    """
    return Window(at_step, steps, when_slower=when_slower, out=out, name=name, quiet=quiet)


def _script_name() -> str:
    main = sys.modules.get("__main__")
    path = getattr(main, "__file__", None) or (sys.argv[0] if sys.argv and sys.argv[0] else "")
    return Path(path).stem if path and not path.startswith("-") else "window"


def _run_dir(out: Union[str, Path, None], name: str, at_step: Optional[int], world: int) -> Path:
    """`out`, else diagnose_runs/<timestamp>-<name>-window-step<N>; with several ranks a name they all agree on (the
    launcher's run id), since their clocks may straddle a second."""
    where = f"step{at_step}" if at_step is not None else "slower"
    if out:
        return Path(out)
    if world > 1:
        job = os.environ.get("TORCHELASTIC_RUN_ID") or os.environ.get("MASTER_PORT", "job")
        return Path("diagnose_runs") / f"{name}-window-{where}-{job}"
    from diagnose.commands.output import new_run_dir

    return new_run_dir(None, f"{name}-window-{where}")
