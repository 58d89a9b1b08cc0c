"""Timed runs of the experiments: the same script with one change at a time, in fresh child processes, profiler
off, within a time budget (which runs, in what order: trials.py). A variant that crashes is `failed`."""
from __future__ import annotations

import re
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable, Optional

from diagnose.capture.runner import run_in_child
from diagnose.experiments import cost
from diagnose.experiments.records import setting_label
from diagnose.model import Change, Measurement, MeasurePlan, RunConfig, ScriptError, Status, SteadyTiming, stated_step_s
from diagnose.optimizations import REGISTRY
from diagnose.optimizations.base import Context
from diagnose.record.run_record import RunRecord

TIMED_ENTRY = "diagnose.experiments.child"  # the timed run's child process: no profiler, windows of steps
# a stream's throughput: samples fed for the first time in their epoch, per second (duplicates do not count)
UNIQUE_SAMPLES = "unique samples/s"

@dataclass(eq=False)  # an arm is itself: two arms of one setting are two configurations, each with its runs
class Arm:
    """One configuration: the baseline, one setting of one optimization, the combination or the ceiling."""
    optimization: str
    setting: dict
    changes: tuple[Change, ...]
    extra_warmup: int = 0
    burst_steps: Optional[int] = None  # loader workers when this arm sets them (None: the script's own)
    unique_data: bool = False  # an IterableDataset feeds training: count samples new in their epoch, not steps
    dropped: str = ""  # why a sweep left it after its first run(s), when another setting did better
    step_s: Optional[float] = None  # its steps' expected length, when measured runs say (long steps: fewer of them)
    short_only: bool = False  # its one run was a short one (three steps): the budget had no room for a timed run
    runs: list[Measurement] = field(default_factory=list)
    run_dirs: list[Path] = field(default_factory=list)

    @property
    def label(self) -> str:
        return setting_label(self.optimization, self.setting)

    def ok_runs(self) -> list[Measurement]:
        return [m for m in self.runs if m.windows]

    def throughputs(self, metric: str) -> list[float]:
        """One throughput per run: all its timed windows' steps (or samples) over their seconds. Windows of one
        process share its luck (placement, caches, clocks), so they are not independent samples: the runs are,
        and each arm has at least two, interleaved with the baseline's. Windows of steady steps leave out the first
        steps of an epoch; their extra time (worker start-up...) is added back, amortised over the epoch (windows of
        whole epochs hold it already)."""
        extra = self.epoch_start_extra_s()
        values = []
        for m in self.ok_runs():
            amounts = [_amount(w, metric) for w in m.windows]
            if any(a is None for a in amounts):
                continue
            seconds = sum(w.seconds + (w.steps / m.steps_per_epoch * extra
                                       if extra and m.steps_per_epoch and not w.restarts_included else 0.0)
                          for w in m.windows)  # a window of whole epochs holds its start-ups already
            if seconds > 0 and sum(amounts) > 0:  # none unique (a stream repeating one item): no rate to compare
                values.append(sum(amounts) / seconds)
        return values

    def epoch_start_extra_s(self) -> float:
        """How much longer an epoch's start-up steps take than as many steady steps, over this arm's runs."""
        starts = sorted(t for m in self.runs for t in m.restart_steps_s)
        steady = [w for m in self.ok_runs() for w in m.windows if not w.restarts_included]
        steps = sum(w.steps for w in steady)
        if not starts or not steps:
            return 0.0
        steady_step_s = sum(w.seconds for w in steady) / steps
        span = max((m.rewarm_steps for m in self.runs), default=1)
        return max(0.0, starts[len(starts) // 2] - span * steady_step_s)


def _amount(window: SteadyTiming, metric: str) -> Optional[int]:
    if metric == UNIQUE_SAMPLES:
        return window.unique_samples
    return window.samples if metric == "samples/s" else window.steps


class ExperimentsInterrupted(Exception):
    """Ctrl-C while an experiment ran: the run in progress has stopped; no further runs start."""


class Scheduler:
    def __init__(self, script: str, script_args: tuple[str, ...], run_dir: Path, ctx: Context, budget_s: float,
                 on_progress: Callable[[str], None]):
        self.script, self.script_args, self.ctx = script, script_args, ctx
        self.root = RunRecord(run_dir).files.experiment_runs
        self.budget_s, self.on_progress = budget_s, on_progress
        self.started = time.monotonic()
        self.count = 0
        self.durations: list[float] = []  # timed runs'
        self.probe_durations: list[float] = []  # short runs that ask whether a batch fits
        # timed runs have the profiler off: the unprofiled step time is theirs, when it was measured
        times = ctx.analysis.step_time_s if ctx.analysis is not None else {}
        self.step_s = max(stated_step_s(times) or cost.STEP_UNKNOWN_S, 1e-4)
        loader = ctx.loader
        self.train_location = loader.location if loader else None
        self.framework = ctx.capture.framework.name if ctx.capture.framework else None
        self.script_workers = loader.num_workers if loader else 0
        # every rank gets the same change; windows then close on step counts alone, so all ranks stop at the
        # same step (a rank stopping earlier would leave the others waiting in a collective)
        saved = RunRecord(run_dir).config()
        self.launcher = saved.launcher if saved else ()
        self.memory_limit_bytes = saved.memory_limit_bytes if saved else None  # variants fit under the same limit
        self.probe_limit_bytes: Optional[int] = None  # short runs' limit when there is none (the batch search's)

    def remaining_s(self) -> float:
        return self.budget_s - (time.monotonic() - self.started)

    first_estimate_s = cost.RUN_UNKNOWN_S  # one run's cost before any has run (the planner sets it from the capture)

    def elapsed_s(self) -> float:
        return time.monotonic() - self.started

    startup_s: Optional[float] = None  # the script's start-up before its first step, as runs measured it
    sample_s: Optional[float] = None  # seconds a sample takes in a step, as runs measured it (the slowest)

    def learn(self, m: Measurement) -> None:
        """Start-up and step lengths from a run that measured them, so later runs whose steps take seconds get the
        time they need (a run out of memory has no profiled step to say it)."""
        if m.startup_s is not None:
            self.startup_s = max(self.startup_s or 0.0, m.startup_s)
        timed = [w for w in m.windows if w.samples]
        if timed:
            rate = sum(w.seconds for w in timed) / sum(w.samples for w in timed)
            self.sample_s = max(self.sample_s or 0.0, rate)
        steps = sum(w.steps for w in m.windows)
        step_s = sum(w.seconds for w in m.windows) / steps if steps else m.first_step_s
        if step_s:
            self.seen_step_s = max(self.seen_step_s or 0.0, step_s)

    seen_step_s: Optional[float] = None  # the longest step the runs so far measured (no loader: no samples)

    def estimate_s(self, arm: Arm) -> float:
        if arm.step_s is not None:  # its own steps' length: a variant with steps of seconds needs its time
            return cost.long_step_run_s(self.startup_s or cost.STARTUP_UNKNOWN_S, arm.step_s, self._epoch_steps(),
                                        self._burst(arm) + 1) + arm.extra_warmup * arm.step_s
        typical = sorted(self.durations)[len(self.durations) // 2] if self.durations else self.first_estimate_s
        return typical + arm.extra_warmup * self.step_s

    def _epoch_steps(self) -> Optional[int]:
        """Optimizer steps an epoch holds at the script's batch (the memory levers keep it), when the loader says."""
        loader = self.ctx.loader
        if loader is None or not loader.dataset_len or not loader.batch_size:
            return None
        return loader.dataset_len // loader.batch_size

    def can_run(self, arm: Arm, probe: bool = False) -> bool:
        return self.remaining_s() >= (self.probe_estimate_s() if probe else self.estimate_s(arm))

    def probe_estimate_s(self) -> float:
        """A short run: start-up and three steps; until one has run, half a timed run's estimate."""
        runs = sorted(self.probe_durations)
        return runs[len(runs) // 2] if runs else 0.5 * self.estimate_s(Arm("baseline", {}, ()))

    def run(self, arm: Arm, probe: bool = False, open_ended: bool = False) -> Optional[Measurement]:
        """One timed run of the arm; with `probe`, a short one that only asks whether it fits (and its peak).
        `open_ended`: its steps' length is unknown, so it may take what the budget has left, and shortens its own
        warm-up and windows once its first step shows steps of seconds."""
        if not self.can_run(arm, probe):
            return None
        self.count += 1
        folder = self.root / f"{self.count:02d}-{re.sub(r'[^A-Za-z0-9._=-]+', '_', arm.label).strip('_')}"
        folder.mkdir(parents=True, exist_ok=True)
        plan = self._probe_plan(arm) if probe else self._timed_plan(arm)
        plan = replace(plan, adapt_to_long_steps=True) if open_ended else plan
        expected = self.probe_estimate_s() if probe else self.estimate_s(arm)
        limit = self.remaining_s() if open_ended else cost.run_limit_s(expected, self.remaining_s())
        config = RunConfig(script=self.script, script_args=self.script_args, out_dir=str(folder), warmup_steps=0,
                           profile_steps=0, max_seconds=limit, measure=plan, launcher=self.launcher,
                           memory_limit_bytes=self.memory_limit_bytes or (self.probe_limit_bytes if probe else None),
                           environment=child_environment(arm))
        self.on_progress(("fits? " if probe else "") + arm.label)
        start = time.monotonic()
        try:
            outcome = run_in_child(config, folder, lambda line, is_err: None, lambda line: None, TIMED_ENTRY)
        except KeyboardInterrupt:  # landed outside the wait for the child
            raise ExperimentsInterrupted() from None
        if outcome.interrupted:
            raise ExperimentsInterrupted()  # its partial windows are not a fair sample: dropped, not compared
        (self.probe_durations if probe else self.durations).append(time.monotonic() - start)
        measurement = _read_measurement(folder)
        if outcome.oom_killed and measurement.status == Status.CRASHED:  # a cgroup's limit: out of memory too
            measurement = replace(measurement, status=Status.OUT_OF_MEMORY, error=ScriptError(
                "Killed", "killed by the kernel's OOM killer (the cgroup's oom_kill count rose)", "", None))
        arm.runs.append(measurement)
        arm.run_dirs.append(folder)
        return measurement

    def _timed_plan(self, arm: Arm) -> MeasurePlan:
        burst = self._burst(arm)
        in_step = bool(self.launcher)
        warmup, window_steps = cost.long_step_plan(arm.step_s) if arm.step_s else (cost.WARMUP_STEPS,
                                                                                    cost.WINDOW_STEPS)
        window_s = cost.window_s(arm.step_s) if arm.step_s else self.window_s()
        return MeasurePlan(changes=arm.changes, train_loader_location=self.train_location, framework=self.framework,
                           warmup_steps=warmup + arm.extra_warmup,
                           warmup_s=0.0 if in_step else cost.WARMUP_S, window_s=0.0 if in_step else window_s,
                           min_window_steps=max(2 * window_steps if in_step else window_steps, 2 * burst),
                           max_window_steps=max(40, 8 * burst), rewarm_steps=burst, burst_steps=burst,
                           windows=cost.WINDOWS,
                           # ranks must stop at the same step: no early stop on windows that agree on one rank
                           min_windows=3 if in_step else 2)

    def _probe_plan(self, arm: Arm) -> MeasurePlan:
        """Three steps and one short window: the optimizer's state is made in the first step, so by the third
        the step's memory has reached its steady peak."""
        burst = self._burst(arm)
        return MeasurePlan(changes=arm.changes, train_loader_location=self.train_location, framework=self.framework,
                           warmup_steps=2, warmup_s=0.0, window_s=0.0, min_window_steps=burst, max_window_steps=burst,
                           rewarm_steps=burst, burst_steps=burst, windows=1, min_windows=1)

    def _burst(self, arm: Arm) -> int:
        return max(1, arm.burst_steps if arm.burst_steps is not None else self.script_workers)

    def window_s(self) -> float:
        return cost.window_s(self.step_s)


def child_environment(arm: Arm) -> tuple[tuple[str, str], ...]:
    """What the arm's changes set in the child's environment before it starts."""
    merged: dict[str, str] = {}
    for change in arm.changes:
        if change.id in REGISTRY:
            merged.update(REGISTRY[change.id].environment(change.setting))
    return tuple(sorted(merged.items()))


def _read_measurement(folder: Path) -> Measurement:
    record = RunRecord(folder)
    measured = record.job_measurement()
    if measured is not None:
        return measured
    log = record.script_log()[-2000:]
    return Measurement(status=Status.CRASHED, windows=(), applied=(), startup_s=None, first_step_s=None, losses=(),
                       peak_memory_bytes=None, steps_seen=0, error=None if not log else _crash_error(log))


def _crash_error(log: str):
    from diagnose.model import ScriptError

    last = [line for line in log.splitlines() if line.strip()][-1:] or ["the process died"]
    return ScriptError("Crash", last[0], log, None)


def arms_for(optimization_id: str, ctx: Context) -> list[Arm]:
    optimization = REGISTRY[optimization_id]
    stream = ctx.loader is not None and ctx.loader.dataset_kind == "iterable"
    return [Arm(optimization_id, setting, (Change(optimization_id, setting),),
                optimization.extra_warmup_steps(setting, ctx), optimization.burst_steps(setting, ctx),
                unique_data=stream)
            for setting in optimization.settings(ctx)]
