"""A timed run for an experiment: the script with one set of changes, no profiler. Warms up past worker
start-up, prefetch buffers and compilation, then times windows of steps (throughput = steps / wall time,
not a median step: steps with workers are bursty). Records the loss passed to backward() without a sync.
On a GPU the device is synchronised at the edges of each timed window, never inside one, so a window times
the GPU's work, not the host's enqueueing."""
from __future__ import annotations

import random
import time
from dataclasses import dataclass, replace
from enum import Enum
from typing import Any, Optional

import torch

from diagnose.capture.bursts import Bursts
from diagnose.capture.device import Nvml, device_in_use, peak_memory, sync_device
from diagnose.capture.dynamo import compile_seconds
from diagnose.capture.energy import EnergyMeter
from diagnose.capture.fingerprint import sample_fingerprints
from diagnose.capture.host import ScriptHost
from diagnose.capture.instrument import Instrumentation
from diagnose.capture.probe import peak_rss_bytes
from diagnose.experiments.cost import long_step_plan
from diagnose.experiments.turns import TurnTaker
from diagnose.model import FedRecord, Measurement, MeasurePlan, ScriptError, Status, SteadyTiming
from diagnose.optimizations.runtime import build_change_set
from diagnose.record.run_record import RunRecord

MAX_LOSSES = 20_000
MAX_FINGERPRINTS = 50_000  # samples recorded: enough to compare runs of a few thousand steps (about 1 MB of JSON)
MAX_EPOCH_SET = 2_000_000  # samples remembered per epoch to count the new ones (~150 MB of Python ints at most)


def batch_samples(batch: Any) -> Optional[int]:
    """Samples in a batch: the first dimension of its first tensor."""
    if isinstance(batch, torch.Tensor):
        return int(batch.shape[0]) if batch.dim() else None
    if isinstance(batch, dict):
        batch = list(batch.values())
    if isinstance(batch, (list, tuple)):
        for item in batch:
            found = batch_samples(item)
            if found is not None:
                return found
    return None


class FedSamples:
    """The fingerprints of every sample the training loader fed, in order, with where each epoch began; and how
    many of them were new in their epoch (an IterableDataset replayed by every worker feeds each sample N times).
    Hashing runs on the training thread (a batch may be changed in place once the script has it), timed."""

    def __init__(self):
        self.fingerprints: list[int] = []
        self.on_device: list[torch.Tensor] = []  # batches the loader put on a GPU: read back at the end, no sync
        self.epoch_starts: list[int] = []
        self.seen_this_epoch: set[int] = set()
        self.unique = 0
        self.counts_unique = True  # False once a batch could not be fingerprinted on the host
        self.hash_s = 0.0
        self.batches = 0
        self.unhashable = 0  # batches with no part that has a row per sample
        self.shapes: Optional[tuple] = None  # the last batch's row shapes
        self.ragged = False

    def add(self, batch: Any, samples: Optional[int]) -> None:
        start = time.perf_counter()
        try:
            found, shapes = sample_fingerprints(batch, samples)
            self.ragged = self.ragged or (self.shapes is not None and shapes != self.shapes)
            self.shapes = shapes
        except Exception:  # an exotic tensor must never break the run it measures: this batch is not fingerprinted
            found = None
        self.batches += 1
        if found is None:
            self.unhashable += 1
            self.counts_unique = False
        elif found.device.type != "cpu" or self.on_device:
            self.on_device.append(found)
            self.counts_unique = False
        else:
            values = found.tolist()
            if len(self.fingerprints) < MAX_FINGERPRINTS:
                self.fingerprints.extend(values)
            self._count_unique(values)
        self.hash_s += time.perf_counter() - start

    def _count_unique(self, values: list[int]) -> None:
        if len(self.seen_this_epoch) > MAX_EPOCH_SET:
            self.counts_unique = False  # an endless stream: stop counting rather than hold every fingerprint
            return
        new = set(values) - self.seen_this_epoch
        self.unique += len(new)
        self.seen_this_epoch |= new

    def new_epoch(self) -> None:
        self.epoch_starts.append(len(self.fingerprints) + sum(len(t) for t in self.on_device))
        self.seen_this_epoch = set()

    def record(self) -> FedRecord:
        values = list(self.fingerprints)
        if self.on_device:
            values += torch.cat([t.to("cpu") for t in self.on_device]).tolist()
        values = values[:MAX_FINGERPRINTS]
        return FedRecord(fingerprints=tuple(values),
                         epoch_starts=tuple(s for s in self.epoch_starts if s < len(values)),
                         hash_s=self.hash_s, batches=self.batches, unhashable=self.unhashable, ragged=self.ragged)


class StepKind(Enum):
    """What a step that just ended was, to a timed run (MeasureSession._classify_last_step)."""
    WARM_UP = "warm-up"
    RESTART = "restart"  # part of an epoch's start-up after the warm-up: it cuts the open window
    STEADY = "steady"


@dataclass(frozen=True)
class EpochMark:
    """Where an epoch began, for windows of whole epochs: the time its iterator was made, and the boundaries,
    samples and first-seen samples counted by then."""
    time: float
    boundaries: int
    samples: int
    unique: int


class MeasureSession(ScriptHost):
    """A timed run: its state, all of it declared here; its plan (config.measure, adapted to long steps by
    adapted_plan) and how its windows close (measure_bursts) are pure functions of the plan."""

    def __init__(self, config, run_dir, progress):
        self.plan: MeasurePlan = config.measure
        changes = build_change_set(list(self.plan.changes), self.plan.train_loader_location,
                                    self.plan.framework)
        instr = Instrumentation(self.boundary, changes, on_batch=self.on_batch, on_loss=self.on_loss,
                                on_epoch=self.on_epoch)
        super().__init__(config, run_dir, progress, instr)
        # the steps: boundary i's time and the samples by then
        self.boundaries: list[float] = []  # the end of each step (the first: the end of step 0's set-up)
        self.samples_at: list[int] = []  # samples fetched by then
        self.unique_at: list[int] = []  # samples not fed before in the same epoch, by then
        # what the loader fed
        self.fed = FedSamples()
        self.samples = 0
        self.samples_known = True
        self.last_samples = 0  # in the last batch
        self.losses: list[torch.Tensor] = []
        # epochs: the next step begins a new one (worker start-up, sampler reset); its start-up's steps left to see
        self.epoch_started = False
        self.epoch_began_at: Optional[int] = None  # boundaries seen when the last epoch's iterator was made
        self.steps_per_epoch: Optional[int] = None
        self.span_left, self.span_total = 0, 0.0  # the epoch start-up being seen: its steps left, its time so far
        self.restart_steps: list[float] = []
        # epochs too short for a window of steady steps: windows run from one epoch's start to a later one's
        self.whole_epochs = False
        self.epoch_mark: Optional[EpochMark] = None
        # the timed windows (SteadyTiming): the open one's first boundary, the wall time's (epoch start-ups
        # included), the closed ones
        self.timing_start: Optional[int] = None
        self.wall_start: Optional[int] = None
        self.timings: list[SteadyTiming] = []
        self.closed_here = False  # a window closed at this boundary, synchronised: the next opens here
        self.stop_due = False  # windows enough at an epoch's end: stop at the next boundary, not inside iter()
        self.finishing = False  # the script has ended: a last window may close, nothing more to stop
        self.energy = _energy_meter()  # read at the timed span's edges: the last warm-up boundary, each window's end
        self.energy_from: Optional[int] = None  # the boundary the span starts at
        # an interleaved comparison: one window per turn, the window just timed handed back at the step's end
        self.turns = TurnTaker(self.plan.turns_fifo, progress) if self.plan.turns_fifo else None
        self.turn_due: Optional[SteadyTiming] = None
        self._seed()

    def _seed(self) -> None:
        random.seed(self.plan.seed)
        torch.manual_seed(self.plan.seed)
        try:
            import numpy

            numpy.random.seed(self.plan.seed)
        except ImportError:
            pass

    def on_batch(self, batch: Any) -> None:
        n = batch_samples(batch)
        self.last_samples = n or 0
        if n is None:
            self.samples_known = False
        else:
            self.samples += n
        self.fed.add(batch, n)

    def on_loss(self, loss: torch.Tensor) -> None:
        if len(self.losses) < MAX_LOSSES:
            self.losses.append(loss.detach().reshape(()))  # kept on its device: no sync per step

    def on_epoch(self, iterator: Any) -> None:
        if not self.whole_epochs and self.timing_start is not None and sync_device():
            self._close_at_epoch_end()
        self.epoch_started = True
        self.fed.new_epoch()
        seen = len(self.boundaries) - self.epoch_began_at if self.epoch_began_at is not None else None
        try:
            self.steps_per_epoch = len(iterator)
        except TypeError:  # a stream has no length: its epochs are as long as they were seen to be
            if seen is not None:
                self.steps_per_epoch = seen
        self.epoch_began_at = len(self.boundaries)
        if seen is not None and not self.whole_epochs and seen - self.span_steps < measure_bursts(self.plan).least:
            self._time_whole_epochs()
        if self.whole_epochs and self.wall_start is not None:
            self._mark_epoch()

    def _time_whole_epochs(self) -> None:
        """An epoch's steady steps (optimizer steps seen, not batches: accumulation makes fewer) cannot fill a
        window: from now on windows span whole epochs, start-ups included, as the user's run pays them."""
        self.whole_epochs = True
        self.timing_start = None  # an open window of steady steps would be cut at this epoch's start-up anyway

    def _mark_epoch(self) -> None:
        """An epoch starts: the window open since an earlier epoch's start closes here once it has lasted the
        plan's window and held two steps; the next one starts here."""
        sync_device()
        mark = EpochMark(time.monotonic(), len(self.boundaries), self.samples, self.fed.unique)
        start = self.epoch_mark
        if start is not None and (mark.boundaries - start.boundaries < max(2, self.plan.burst_steps)
                                  or mark.time - start.time < self.plan.window_s):
            return  # too short yet: the window goes on over the next epoch
        self.epoch_mark = mark
        if start is None:
            return
        self._record_epochs(start, mark)

    def _record_epochs(self, start: EpochMark, end: EpochMark) -> None:
        steps, seconds = end.boundaries - start.boundaries, end.time - start.time
        timing = SteadyTiming(steps=steps, seconds=seconds,
                              samples=end.samples - start.samples if self.samples_known else None,
                              wall_steps=steps, wall_seconds=seconds,
                              unique_samples=end.unique - start.unique if self.fed.counts_unique else None,
                              restarts_included=True, **self._compiled_between(start.boundaries, end.boundaries))
        # the epoch's first step has not ended: stop (or hand the turn back) at its boundary, not inside iter()
        self.stop_due = self._record(timing, len(self.boundaries)) or self.stop_due

    def on_boundary(self, count: int) -> None:
        self._sort_step()
        if self.turn_due is not None:
            timing, self.turn_due = self.turn_due, None
            self._resume(self.turns.hand_back(timing.steps, timing.seconds, timing.samples))

    def _resume(self, go: bool) -> None:
        """Back from waiting for a turn: the next window starts now, not when the wait began; or stop."""
        if not go:
            self.stop(Status.COMPLETED)
        now = time.monotonic()
        if self.epoch_mark is not None:  # a window of whole epochs began before the wait: the wait is not in it
            self.epoch_mark = replace(self.epoch_mark, time=self.epoch_mark.time + now - self.boundaries[-1])
        self.boundaries[-1] = now

    def _sort_step(self) -> None:
        """A step just ended. Sort it (warm-up, an epoch's start-up, or steady) and close a timed window when one
        is due. Windows hold only consecutive steady steps, and a whole number of bursts of `burst_steps`: with
        N workers batches arrive N at a time, so any N consecutive steady steps span one worker period."""
        if self.stop_due and not self.finishing:
            self.stop(Status.COMPLETED)
        if self.timing_start is None and not self.closed_here:
            sync_device()  # this boundary may open a window: the GPU work queued so far belongs before it
        self.closed_here = False
        self.boundaries.append(time.monotonic())
        if self.plan.adapt_to_long_steps and len(self.boundaries) == 2:
            self.plan = adapted_plan(self.plan, self.boundaries[1] - self.boundaries[0])
        self.samples_at.append(self.samples)
        self.unique_at.append(self.fed.unique)
        kind = self._classify_last_step()
        if kind is StepKind.WARM_UP:
            self.energy.start()  # the span may start here: the next step may be the first timed one
            return
        if self.wall_start is None and self.turns is not None:
            self._resume(self.turns.ready())  # the step that just ended ran beside the other side's warm-up: untimed
            self.wall_start = self.energy_from = len(self.boundaries) - 1
            return
        if self.wall_start is None:
            self.wall_start = len(self.boundaries) - 2
            self.energy_from = self.wall_start if self.energy_from is None else self.energy_from
            self.progress("measuring")
        if self.whole_epochs:
            return  # its windows close at epochs' starts (on_epoch)
        if kind is StepKind.RESTART:
            self._close_timing(len(self.boundaries) - 2, partial=True)  # the window ends where this step began
            return
        end = len(self.boundaries) - 1
        if self.timing_start is None:
            self.timing_start = end - 1
        steps, elapsed = end - self.timing_start, self.boundaries[end] - self.boundaries[self.timing_start]
        if measure_bursts(self.plan).closes(steps, elapsed):
            if sync_device():  # the window ends when its steps' GPU work has, not when the host queued it
                self.boundaries[end] = time.monotonic()
            self._close_timing(end, partial=False)
            self.closed_here = True  # the next window opens here: synchronised already

    def _close_timing(self, last: int, partial: bool) -> None:
        """Record the open window. A partial one (cut short by an epoch's start-up or the script's end) keeps
        its whole bursts only, and is dropped when it has too few steps to time."""
        if self.timing_start is None:
            return
        start, bursts = self.timing_start, measure_bursts(self.plan)
        steps = bursts.whole(last - start)
        self.timing_start = None
        if partial and not bursts.keeps_cut(steps):
            return
        if partial and device_in_use():
            return  # its end was not synchronised (an epoch's start cut it): on a GPU it would time the host
        end = start + steps
        b, samples = self.boundaries, self.samples_at
        # a step that compiled (a new input size) is paid once, its compile time counted apart (compile_s): it is
        # left out of the window, its time and its samples
        compiled = self.instr.dynamo.compiling_steps()

        def left_out(first: int) -> tuple[int, float, int]:
            inside = [i for i in compiled if first <= i < end]
            return (len(inside), sum(b[i + 1] - b[i] for i in inside),
                    sum(samples[i + 1] - samples[i] for i in inside))

        out_steps, out_s, out_samples = left_out(start)
        wall_out_steps, wall_out_s, _ = left_out(self.wall_start)
        if steps - out_steps < 1:
            return
        timing = SteadyTiming(steps=steps - out_steps, seconds=b[end] - b[start] - out_s,
                              samples=samples[end] - samples[start] - out_samples if self.samples_known else None,
                              wall_steps=end - self.wall_start - wall_out_steps,
                              wall_seconds=b[end] - b[self.wall_start] - wall_out_s,
                              unique_samples=self._unique_between(start, end), **self._compiled_between(start, end))
        enough = self._record(timing, end)
        if enough and not self.finishing:
            self.stop(Status.COMPLETED)

    def _compiled_between(self, start: int, end: int) -> dict:
        """What torch.compile did in steps start .. end - 1 (a window's): the steps that compiled, their compile time
        and the recompilations among them (SteadyTiming's compiled_steps, compile_s, recompiles)."""
        events = self.instr.dynamo.events_between(start, end)
        return dict(compiled_steps=len({e.step for e in events if e.seconds > 0}),
                    compile_s=sum(e.seconds for e in events), recompiles=sum(1 for e in events if e.is_recompile))

    def _unique_between(self, start: int, end: Optional[int]) -> Optional[int]:
        """Samples first fed in this epoch between two boundaries (end None: until now); None when unknown."""
        if not self.fed.counts_unique:
            return None
        return (self.fed.unique if end is None else self.unique_at[end]) - self.unique_at[start]

    def _record(self, timing: SteadyTiming, next_wall_start: int) -> bool:
        """Keep a timed window; True when the run has windows enough (the plan's count, or agreeing ones)."""
        self.timings.append(timing)
        if self.turns is not None and not self.finishing:
            self.turn_due = timing
        self.wall_start = next_wall_start
        self._energy_lap(next_wall_start)
        self.progress(f"window {len(self.timings)} {self.plan.windows}")
        return len(self.timings) >= self.plan.windows or self._timings_agree()

    def _energy_lap(self, end: int) -> None:
        """The counters from the span's start to boundary `end` (len(boundaries): now), with its steps and samples."""
        if self.energy_from is None:
            return
        samples_end = self.samples_at[end] if end < len(self.samples_at) else self.samples
        samples = samples_end - self.samples_at[self.energy_from] if self.samples_known else None
        self.energy.lap(end - self.energy_from, samples)

    def _timings_agree(self) -> bool:
        """The last windows' rates agree: another window would tell little more (a shorter run, more runs)."""
        recent = self.timings[-self.plan.min_windows:]
        if len(recent) < self.plan.min_windows or len(recent) < 2:
            return False
        rates = [w.steps / w.seconds for w in recent if w.seconds > 0]
        return len(rates) == len(recent) and max(rates) <= min(rates) * (1 + self.plan.agree_frac)

    def _close_at_epoch_end(self) -> None:
        """On a GPU, the window an epoch's end cuts closes here, device-synchronised, with the epoch's last step in
        it (it has just finished): its boundary at the next step would come after the epoch's start-up."""
        start = self.timing_start
        steps = len(self.boundaries) - start
        self.timing_start = None
        if not measure_bursts(self.plan).keeps_cut(steps):
            return
        now = time.monotonic()
        samples = self.samples - self.samples_at[start] if self.samples_known else None
        timing = SteadyTiming(steps=steps, seconds=now - self.boundaries[start], samples=samples,
                              wall_steps=len(self.boundaries) - self.wall_start,
                              wall_seconds=now - self.boundaries[self.wall_start],
                              unique_samples=self._unique_between(start, None),
                              **self._compiled_between(start, len(self.boundaries)))
        # the wall time restarts at the next boundary: the epoch's start-up is timed on its own
        self.stop_due = self._record(timing, len(self.boundaries))  # stops at the next boundary, not inside iter()
        self.closed_here = True

    def _time_what_ran(self) -> None:
        """The run ended (its time limit, or the script's own end) before a window closed: its steps after the
        warm-up are timed as one window, epochs' start-ups counted as they came, so the steps it ran still give a
        verdict (long steps in short epochs: a few optimizer steps were all the budget allowed)."""
        if self.wall_start is None or len(self.boundaries) - 1 - self.wall_start < 2:
            return
        start, end = self.wall_start, len(self.boundaries) - 1
        steps, seconds = end - start, self.boundaries[end] - self.boundaries[start]
        if seconds <= 0:
            return
        self.timings.append(SteadyTiming(
            steps=steps, seconds=seconds,
            samples=self.samples_at[end] - self.samples_at[start] if self.samples_known else None,
            wall_steps=steps, wall_seconds=seconds, unique_samples=self._unique_between(start, end),
            restarts_included=True, **self._compiled_between(start, end)))

    def _classify_last_step(self) -> StepKind:
        """Sort the step that just ended: warm-up, part of an epoch's start-up (the step in which the loader's
        iterator was made, joining the old workers and starting new ones, then the steps while the new workers
        deliver their first batches), or steady."""
        transition, self.epoch_started = self.epoch_started, False
        if len(self.boundaries) < 2:
            return StepKind.WARM_UP  # the first epoch starts before the first step: it is warm-up
        if transition:
            self.span_left, self.span_total = self.span_steps, 0.0
        in_span = self.span_left > 0
        if in_span:
            self.span_total += self.boundaries[-1] - self.boundaries[-2]
            self.span_left -= 1
            if self.span_left == 0:
                self.restart_steps.append(self.span_total)
        if self.wall_start is None:
            plan = self.plan
            warmed = len(self.boundaries) - 1 > plan.warmup_steps and \
                self.boundaries[-2] - self.boundaries[0] >= plan.warmup_s
            if not warmed or (in_span and not self.whole_epochs) or self._still_compiling():
                return StepKind.WARM_UP  # (whole epochs: every step may be a start-up's, and windows hold them)
        return StepKind.RESTART if in_span else StepKind.STEADY

    def _still_compiling(self) -> bool:
        """The step that just ended compiled (a new shape, a recompilation): warm-up goes on, up to a bound past
        the plan's, so that the windows time the steps the rest of the run takes."""
        return self.instr.dynamo.settling(len(self.boundaries) - 1, self.plan.warmup_steps)

    @property
    def span_steps(self) -> int:
        return self.plan.rewarm_steps + 1

    def finish(self, status: str, error: Optional[ScriptError]) -> int:
        self.finishing = True
        if status != Status.COMPLETED:
            self._close_timing(len(self.boundaries) - 1, partial=True)
        if not self.timings and status in (Status.TIMEOUT, Status.SCRIPT_FINISHED):
            self._time_what_ran()
        peak = self._peak_memory()
        # a main thread still waiting in native code (a hung device) must not be synced from here
        losses = torch.stack(self.losses).float().cpu().tolist() if self.losses and not self.native_wait else []
        b = self.boundaries
        measurement = Measurement(
            status=status,
            windows=tuple(self.timings),
            applied=tuple(self.instr.changes.applied),
            startup_s=b[0] - self.t0 if b else None,
            first_step_s=b[1] - b[0] if len(b) > 1 else None,
            losses=tuple(losses),
            peak_memory_bytes=peak,
            steps_seen=len(b),
            error=error,
            restart_steps_s=tuple(self.restart_steps),
            steps_per_epoch=self.steps_per_epoch,
            rewarm_steps=self.span_steps,
            fed=self.fed.record(),
            energy=self.energy.readings(),
            compile_s=compile_seconds(self.instr.dynamo.compilation()),
        )
        RunRecord(self.run_dir).save_measure(measurement)
        return 0 if Status.is_ok(status) else 1

    def _peak_memory(self) -> Optional[int]:
        """Under a memory limit, what counts against it (it decides whether a variant fits; an rlimit counts the
        whole address space); else the CUDA allocator's reserved peak, or the process's resident peak on the host."""
        if self.memory.limit_bytes or self.memory.counts() == "address":
            return self.memory.peak_in_use_bytes()
        peak, _ = peak_memory()
        return peak if peak is not None else peak_rss_bytes()


def adapted_plan(plan: MeasurePlan, step_s: float) -> MeasurePlan:
    """The plan for steps as long as the first one (`step_s`): fewer warm-up steps and steps to a window when a
    step takes seconds (cost.long_step_plan)."""
    warmup, window = long_step_plan(step_s)
    return replace(plan, warmup_steps=min(plan.warmup_steps, warmup),
                   min_window_steps=min(plan.min_window_steps, max(window, plan.burst_steps)))


def measure_bursts(plan: MeasurePlan) -> Bursts:
    """How a timed run's windows close: at whole bursts of `burst_steps`, once `min_window_steps` have lasted
    `window_s` (or `max_window_steps`, whatever their time); one cut short keeps whole bursts, half a window (and
    two steps) at least."""
    return Bursts(size=plan.burst_steps, least=plan.min_window_steps, most=plan.max_window_steps,
                  seconds=plan.window_s, least_cut=max(plan.burst_steps, plan.min_window_steps // 2, 2))


def _energy_meter() -> EnergyMeter:
    nvml = Nvml()
    return EnergyMeter(getattr(nvml, "nvml", None), nvml.handle)
