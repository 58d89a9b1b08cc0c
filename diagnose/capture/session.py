"""The diagnosis run inside the child process: warm up, time steps without the profiler, profile the chosen steps,
stop the script, and write RUN/capture.json, samples.json, stacks.json and the trace in tb/."""
from __future__ import annotations

import datetime
import json
import math
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import Optional

import psutil
import torch

from diagnose.capture import hang, probe, run_length, step_plan, worker_failure, worker_stacks
from diagnose.capture.device import allocator_stats, peak_memory
from diagnose.capture.energy import EnergyMeter
from diagnose.capture.environment import environment
from diagnose.capture.flop_counter import StepFlops
from diagnose.capture.host import ScriptHost, signals_held
from diagnose.capture.instrument import Instrumentation
from diagnose.capture.limits import cgroup_candidates, oom_kill_count
from diagnose.capture.memory import StepMemory
from diagnose.capture.plain_timer import PlainTimer
from diagnose.capture.profiled_window import ProfiledWindow
from diagnose.capture.run_facts import cost_facts
from diagnose.capture.sampler import StackSampler, SystemSampler
from diagnose.capture.startup import StartupWatch
from diagnose.capture.step_plan import Feed, Phase, plan_steps
from diagnose.model import (
    Capture,
    FlopCount,
    Hang,
    LoaderInfo,
    LossCheck,
    MemorySizes,
    PlainTiming,
    RunConfig,
    ScriptError,
    Startup,
    Status,
)
from diagnose.record.run_record import RunRecord

# Ends of the script by itself or at --max-seconds: before a step was profiled, the note says what would fit.
ENDS_OF_SCRIPT = (Status.SCRIPT_FINISHED, Status.TIMEOUT)
INSTRUMENTED_STEPS = 2  # the first steps, slowed by measuring memory (the first) and counting FLOPs (the second)
MAX_LOSSES = 4096  # losses kept for the finite check: a long warm-up does not grow memory without end


def typical_step_s(boundaries_s: list[float], compile_s: Optional[dict[int, float]] = None) -> float:
    """A plain step's time: the first two steps are left out while later ones exist (the first makes lazy state
    and has its memory measured, the second has its FLOPs counted: both slower), and one stalled step (a loaded
    machine, a checkpoint) must not shrink the plan: the lower of the last step and the median of the last five.
    Before a plain step, the quicker of the first two (both over-estimate; long steps stay long in both)."""
    compile_s = compile_s or {}  # a step that compiled: its time less the compiling (the next steps do not pay it)
    durations = [max(b - a - compile_s.get(i, 0.0), 1e-6)
                 for i, (a, b) in enumerate(zip(boundaries_s, boundaries_s[1:]))]
    plain = durations[INSTRUMENTED_STEPS:]
    if not plain:
        return min(durations)
    return min(plain[-1], statistics.median(plain[-5:]))


class Session(ScriptHost):
    """The diagnosis run: warm up, profile the chosen steps, stop, write capture.json and the trace."""

    def __init__(self, config: RunConfig, run_dir: Path, progress, trace_dir: Path, worker_name: str = "rank0"):
        super().__init__(config, run_dir, progress,
                         Instrumentation(self.boundary, on_epoch=self._on_epoch, on_loss=self._on_loss,
                                         on_batch=self._on_batch))
        self.trace_dir, self.worker_name = trace_dir, worker_name
        self.instr.worker_stack_folder = Path(tempfile.mkdtemp(prefix="diagnose-worker-stacks-"))
        self.workers_at_deadline: tuple[str, ...] = ()  # each DataLoader worker's state when a step hung
        self.phase = Phase.WARM_UP
        self.window: Optional[ProfiledWindow] = None  # open over the profiled steps
        self.profiled = 0
        self.profile_start: Optional[int] = None  # the step the profiler started at
        self.boundaries_s: list[float] = []
        self.sync_mark_ns: Optional[int] = None
        self.profiled_span_s: list[float] = []  # the profiled steps' start and end, on the run's clock
        self.plain_timer: Optional[PlainTimer] = None  # the timer of the TIMED phase
        self.plain_timing: Optional[PlainTiming] = None
        self.system = SystemSampler(self.t0)
        self.energy = EnergyMeter(getattr(self.system.nvml, "nvml", None), self.system.nvml.handle,
                                  clock=lambda: time.monotonic() - self.t0)  # read at the plain timing's edges
        self.script_loops: Optional[run_length.Observed] = None  # the loops around the step: the run's length
        self.step_memory: Optional[StepMemory] = None  # sizes measured over the first step
        self.memory_sizes: Optional[MemorySizes] = None
        self.stacks = StackSampler(threading.main_thread().ident)
        self.startup_watch = StartupWatch(threading.main_thread().ident, self.t0, progress,
                                          lambda: self.instr.first_forward_at is not None)
        self.startup: Optional[Startup] = None
        self.flop_counter: Optional[StepFlops] = None
        self.flops: Optional[FlopCount] = None
        self.flops_note = "no warm-up step to count in (--warmup 1 or more counts one)"
        # the warm-up, timed and profiled steps as run: fewer than asked when steps are long against --max-seconds
        self.plan = plan_steps(config.warmup_steps, config.profile_steps)
        self.fit_note = ""
        self.fitted_steps = 0
        self.losses: list[tuple[int, torch.Tensor]] = []  # (step, loss) kept on its device: read back at the end
        self.hang: Optional[Hang] = None  # a step that never ended: where it waited
        self.batch_bytes: Optional[int] = None  # the first training batch's tensors: what a worker passes back

    def usual_step_s(self) -> Optional[float]:
        return self._plain_step_s()

    def _plain_step_s(self) -> Optional[float]:
        """A plain step's time so far, its compiling left out (None: no step has ended)."""
        if len(self.boundaries_s) < 2:
            return None
        return typical_step_s(self.boundaries_s, self.instr.dynamo.seconds_by_step())

    def _open_step_s(self) -> Optional[float]:
        """How long the step open when the deadline came had lasted (None: no deadline, or no step yet)."""
        if self.deadline_at is None or not self.boundaries_s:
            return None
        return self.deadline_at - (self.t0 + self.boundaries_s[-1])

    def on_deadline_stacks(self) -> None:
        """A hang (not slow steps): ask the DataLoader's workers where they are before the iterator goes away."""
        open_s = self._open_step_s()
        if open_s is not None and hang.is_hang(open_s, self.usual_step_s()):
            self.workers_at_deadline = worker_stacks.worker_stacks(list(self.instr.seen.iterators),
                                                                   self.instr.worker_stack_folder)

    def _hang(self) -> Optional[Hang]:
        """The deadline found a step open for HANG_FACTOR typical steps (HANG_MIN_S at least): where it waited."""
        open_s, typical = self._open_step_s(), self.usual_step_s()
        if self.deadline_stacks is None or open_s is None or not hang.is_hang(open_s, typical):
            return None
        stack, threads = self.deadline_stacks
        return hang.describe(stack, len(self.boundaries_s) - 1, open_s, typical, threads, self.native_wait,
                             self.workers_at_deadline)

    def _on_batch(self, batch) -> None:
        if self.batch_bytes is None:
            self.batch_bytes = worker_failure.batch_bytes(batch)

    def _on_loss(self, loss: torch.Tensor) -> None:
        if len(self.losses) < MAX_LOSSES:
            self.losses.append((max(len(self.boundaries_s) - 1, 0), loss.detach().reshape(())))

    def own_dirs(self) -> list[Path]:
        return [self.run_dir, self.trace_dir]

    # -- step boundaries ----------------------------------------------------------------------------
    def on_boundary(self, count: int) -> None:
        now = time.monotonic()
        self.boundaries_s.append(now - self.t0)
        step = count - 1  # index of the step that starts now
        self._measure_memory(step)
        if step == self.plan.warmup and self._still_compiling(step):
            self.plan = replace(self.plan, warmup=self.plan.warmup + 1)  # time and profile the steps that follow
        if step <= self.plan.warmup:
            self._fit_to_time(step)
        self._count_flops(step)
        if step == self.plan.warmup:
            self.script_loops = run_length.observe(sys._getframe())
        if step == self.plan.warmup and self.plan.timed:
            self._start_unprofiled()
        elif step == self.plan.warmup or (self.phase is Phase.TIMED and self._timing_closed()):
            self._start_profiler(step)
        elif self.phase is Phase.PROFILED:
            self.profiled += 1
            if self.profiled == self.plan.profiled:
                self._stop_profiler()
                self.stop(Status.COMPLETED)  # the script stops here: what it would run after is not measured
        self.progress(f"step {count} {self._planned_steps()} {self.phase.value}")
        if self.phase is Phase.PROFILED:
            self.window.mark_step(step)

    def _still_compiling(self, step: int) -> bool:
        """A step just before this one compiled (a new shape, a recompilation), within a bound past the warm-up
        asked for: warm-up goes on, so the timed and profiled steps are the ones the rest of the run takes."""
        return self.instr.dynamo.settling(step, self.config.warmup_steps)

    def _planned_steps(self) -> int:
        if self.profile_start is not None:
            return self.profile_start + self.plan.profiled
        return self.plan.planned_steps(self._feed())

    def _fit_to_time(self, step: int) -> None:
        """Long steps: fewer warm-up, timed and profiled steps when they would not fit in what is left of
        --max-seconds (step_plan.fit_to_time), and a note that says so."""
        per_step = self._step_estimate(step)
        if per_step is None:
            return
        # ranks plan from the slowest rank's figures: each planning from its own clock could stop a rank a step
        # before its peers, and they would wait for it in their next collective until the job's timeout
        per_step, measured_s = agreed_by_ranks(step, per_step, self.measured_s())
        room = step_plan.room_steps(self.config.max_seconds, measured_s, per_step)
        fitted = step_plan.fit_to_time(self.plan, self._feed(), step, room)
        if fitted is None:
            return
        self.plan = fitted
        limit = f"--max-seconds {self.config.max_seconds:g}"
        if step_plan.fits(fitted, step, room):
            untimed = "; none timed without the profiler"
            timed, untimed = (f", {fitted.timed} timed", "") if fitted.timed else ("", untimed)
            self.fit_note = (f"steps take about {per_step:.1f} s: {fitted.warmup} warm-up{timed} and "
                             f"{fitted.profiled} profiled step(s) fit {limit}{untimed}")
        else:
            self.fit_note = (f"steps take about {per_step:.1f} s: {step_plan.MIN_PROFILED} profiled steps do not "
                             f"fit {limit}; run with {self._options_that_fit(per_step)}")

    def _too_few_note(self, status: str) -> str:
        """No step was profiled: the step time seen, and the options that would have given a diagnosis."""
        marks = self.boundaries_s
        step, seen = marks[-1] - marks[-2], len(marks)
        if status == Status.SCRIPT_FINISHED:
            steps = step_plan.steps_that_fit(seen, self._feed())
            if steps >= step_plan.MIN_PROFILED:
                self.fitted_steps = steps
                return f"steps took about {step:.1f} s and the script ran {seen}: run with --warmup 1 --steps {steps}"
            return f"steps took about {step:.1f} s: give the script more steps (iterations or data) to profile"
        return f"steps take about {step:.1f} s: run with {self._options_that_fit(step)}"

    def _options_that_fit(self, step_s: float) -> str:
        startup = self.boundaries_s[0] if self.config.startup_seconds is None else 0.0
        return step_plan.options_that_fit(step_s, startup)

    def _step_estimate(self, step: int) -> Optional[float]:
        """A plain step's time from the steps so far; before one completed, the time from the model's first forward
        to the first boundary when that boundary ended a step (an optimizer step's or backward()'s)."""
        if step >= 1:
            return self._plain_step_s()
        if self.instr.compiled:  # the first step compiled the model: its time says nothing of the steps after
            return None
        first = self.instr.first_forward_at
        # ranks decide on a whole step only: the collectives keep those alike, so ranks profile the same steps
        if self.instr.steps.source in ("optimizer", "backward") and first is not None and current_rank() is None:
            return max(self.t0 + self.boundaries_s[0] - first, 1e-3)
        return None

    def _measure_memory(self, step: int) -> None:
        """The first training step's sizes, measured from the script's start (the first step boundary may come
        only after its backward, once the training loader is known) to the second boundary; to the first when
        StepBoundaries held the boundaries until the first optimizer step (that one came after a whole step)."""
        first_step_done = 0 if self.instr.steps.unsettled else 1
        if step == first_step_done and self.step_memory is not None and self.memory_sizes is None:
            self.memory_sizes = self._finish_memory()

    def _count_flops(self, step: int) -> None:
        """The FLOPs of one warm-up step: the second when there are two (the first makes lazy state), else the
        first; counting slows that step, which is why it is not a profiled or timed one."""
        warmup = self.plan.warmup
        target = min(1, warmup - 1)
        if warmup < 1 or current_rank() not in (None, 0):
            return
        if step == target and self.instr.compiled:  # a dispatch mode over compiled code would recompile it
            self.flops_note = "the model is compiled: its FLOPs are counted from the profiled ops instead"
        elif step == target:
            self.flop_counter = StepFlops(self.instr.current_phase)
            why_not = self.flop_counter.start()
            if why_not:
                self.flop_counter, self.flops_note = None, why_not
        elif step == target + 1 and self.flop_counter is not None:
            self.flops = self.flop_counter.stop()
            self.flop_counter = None
            self.flops_note = "" if self.flops is not None else "torch's FLOP counter failed on this step"

    def _finish_memory(self) -> Optional[MemorySizes]:
        try:
            return self.step_memory.finish(self.instr.seen.optimizers_alive)
        except Exception:  # a size we cannot read must not cost the run
            self.step_memory.close()
            return None

    def _start_unprofiled(self) -> None:
        """Time the steps as the user runs them, before the profiler has ever started: once it has, the process is
        not as it was (on a CPU the loop of benchmarks/after_profiler.py ran 1.5-1.9x faster after a profiled
        window: the freed profiler's memory spared it 93,000 page faults a step). The timing closes after `timed`
        steps (whole loader bursts), or once it has lasted PROFILED_COST times as long as the plain steps so far
        said (MIN_TIMED at least), so a slowing script does not run twice as long. Ranks close it on the step count
        alone: a rank that started profiling before its peers would profile other steps, and stop before them.
        The loader's workers filled their queue while the instrumented steps (memory, FLOPs) ran: that backlog is
        left out; without warm-up, the first step is instrumented (its memory measured): not timed."""
        per_step = self._plain_step_s()
        timed = self.plan.timed
        budget = step_plan.PROFILED_COST * timed * per_step if per_step and current_rank() is None else None
        feed = self._feed()
        self.plain_timer = PlainTimer(timed, budget, rewarm_steps=int(self.plan.warmup == 0), burst=feed.burst,
                                      backlog=feed.backlog, meter=self.energy,
                                      step_compiled=self.instr.dynamo.compiled_last_step)
        self.phase = Phase.TIMED

    def _feed(self) -> Feed:
        """The training loader's pace (none known: no workers)."""
        loader = self._train_loader()
        return Feed(loader.num_workers, loader.prefetch_factor) if loader is not None else Feed()

    def _train_loader(self) -> Optional[LoaderInfo]:
        index = self.instr.train_loader_index()
        return self.instr.seen.loaders[index] if index is not None else None

    def _on_epoch(self, iterator) -> None:
        """An epoch ends while the unprofiled steps are timed: its start-up (workers, evaluation, checkpoints
        around it) is not a training step's time."""
        if self.phase is Phase.TIMED and self.plain_timing is None:
            self.plain_timing = self.plain_timer.epoch_started()

    def _timing_closed(self) -> bool:
        """One more step timed without the profiler: whether the timing has closed (at an epoch's end, or now), or
        was given up (epochs shorter than it kept restarting it: no step time, and the profile still comes)."""
        timing = self.plain_timing or self.plain_timer.boundary()
        if timing is None and not self.plain_timer.given_up:
            return False
        self.plain_timing, self.plain_timer = timing, None
        return True

    def _start_profiler(self, step: int) -> None:
        window = ProfiledWindow(self.trace_dir, self.worker_name, with_stack=self.config.with_stack)
        # the profiler's start-up and, on the host, its event buffers over the profiled steps are not the script's
        # memory: the host's limit stays lifted until the profiler has stopped (the warm-up and timed steps before
        # run under it); a CUDA limit stays on
        self.memory.lift(host_only=True)
        try:
            window.start()
        except BaseException:
            self.memory.restore()
            raise
        self.window, self.profile_start, self.phase = window, step, Phase.PROFILED
        self.profiled_span_s, self.sync_mark_ns = [window.started_at - self.t0], window.sync_mark_ns
        self.instr.timing = True
        self.stacks.active.set()
        self.progress("profiling")

    def _stop_profiler(self) -> None:
        if self.window is None:
            return
        self.stacks.active.clear()
        self.instr.timing = False
        with signals_held():
            self.progress("writing trace")
            window, self.window, self.phase = self.window, None, Phase.STOPPING
            self.memory.lift()  # exporting the trace needs memory the script's limit does not cover
            try:
                window.stop()
            finally:
                self.memory.restore()
            self.profiled_span_s.append(window.ended_at - self.t0)

    def on_first_step(self) -> None:
        self.startup = self.startup_watch.finish(self.first_step_at - self.t0, stopped_at_limit=False)

    def start_samplers(self) -> None:
        self.system.start()
        self.stacks.start()
        self.startup_watch.start()
        self.step_memory = StepMemory(lambda: self.instr.seen.root_module)

    # -- finishing ----------------------------------------------------------------------------------
    def finish(self, status: str, error: Optional[ScriptError]) -> int:
        last_complete = self.phase is not Phase.PROFILED
        self.hang = self._hang() if status == Status.TIMEOUT else None
        if self.hang is not None:
            status = Status.HUNG
        if self.native_wait:  # the main thread still waits: nothing that syncs the device or needs its state
            self.window, self.flop_counter, self.losses = None, None, []
            self.fit_note = ("the trace of the profiled steps was not written: the main thread never came back from "
                             "native code")
        if self.window is not None:
            self._stop_profiler()
        if self.step_memory is not None and self.memory_sizes is None:  # the first step did not end (out of memory?)
            self.memory_sizes = self._finish_memory()
        if self.flop_counter is not None:  # the script ended inside the counted step: its hooks must not outlive it
            self.flop_counter.stop()
            self.flop_counter, self.flops_note = None, "the script ended inside the step being counted"
        if not self.profiled and status in ENDS_OF_SCRIPT and len(self.boundaries_s) >= 2:
            self.fit_note = self._too_few_note(status)
        if self.startup is None:  # no step came: what it was doing when it ended
            self.startup = self.startup_watch.finish(None, stopped_at_limit=self.stop_reason == Status.TIMEOUT)
        self.progress("probing dataset")
        capture = self._capture(status, error, last_complete)
        shutil.rmtree(self.instr.worker_stack_folder, ignore_errors=True)
        record = RunRecord(self.run_dir)
        span = tuple(self.profiled_span_s) if len(self.profiled_span_s) == 2 else None
        record.save_samples(self.system.finish(span))
        record.save_stacks(self.stacks.finish(self.sync_mark_ns))
        record.save_capture(capture)
        return Status.exit_code_of(status)

    def _failure_surroundings(self, error: Optional[ScriptError]) -> worker_failure.Surroundings:
        if error is None:
            return worker_failure.Surroundings()
        kills_now, before = oom_kill_count(), getattr(self, "oom_kills_at_start", None)
        limits = [c.limit_bytes for c in cgroup_candidates()]
        return worker_failure.Surroundings(
            recent_memory=tuple(self.system.recent_memory),
            oom_kills=kills_now - before if kills_now is not None and before is not None else None,
            cgroup_limit_bytes=min(limits) if limits else None)

    def _capture(self, status: str, error: Optional[ScriptError], last_complete: bool) -> Capture:
        instr = self.instr
        train = instr.train_loader_index()
        peak, capacity = peak_memory()
        kind = "cuda" if peak is not None else "host"
        if peak is None:
            peak, capacity = probe.peak_rss_bytes(), psutil.virtual_memory().total
        waits = instr.seen.wait_s
        wait = max(range(len(waits)), key=waits.__getitem__) if waits and max(waits) > 0 else train
        loader = instr.seen.loaders_alive[wait] if wait is not None else None
        micro_per_step = _usual(instr.steps.micro_per_step[self.plan.warmup:])
        return Capture(
            status=status,
            script=self.config.script,
            script_args=tuple(self.config.script_args),
            step_source=instr.steps.source,
            micro_batches_per_step=micro_per_step,
            fit_note=self.fit_note,
            fitted_steps=self.fitted_steps,
            startup=self.startup,
            startup_limit_s=self.config.startup_seconds,
            loss=loss_check(self.losses),
            hang=self.hang,
            worker_failure=worker_failure.worker_failure(error, self._train_loader(), self.batch_bytes,
                                                         self._failure_surroundings(error)),
            steps_seen=instr.steps.boundaries,
            steps_profiled=self.profiled,
            warmup_steps=self.plan.warmup,
            wall_s=time.monotonic() - self.t0,
            environment=environment(),
            boundaries_s=tuple(self.boundaries_s),
            last_step_complete=last_complete,
            loaders=instr.loader_infos(),
            train_loader=train,
            wait_loader=wait,
            optimizers=tuple(instr.seen.optimizers),
            model=instr.model_info(),
            ddp=instr.ddp.record(),
            fsdp=instr.fsdp.record(),
            dataset_probe=probe.probe_dataset(loader.dataset) if loader is not None and not self.native_wait else None,
            trace_files=tuple(sorted(str(p.relative_to(self.trace_dir.parent))
                                     for p in self.trace_dir.glob(f"{self.worker_name}.*.json*"))),
            counters=dict(instr.seen.counters),
            peak_memory_bytes=peak,
            memory_capacity_bytes=capacity,
            memory_kind=kind,
            allocator=allocator_stats(),
            error=error,
            redirected_writes=self.sandbox.written(),  # in a process of its own: filled in by the parent (runner.py)
            restored_files=tuple(self.sandbox.restored),
            unrestored_files=tuple(self.sandbox.unrestored),
            unprofiled_window=self.plain_timing,
            autocast_dtypes=tuple(sorted(instr.seen.autocast_dtypes)),
            framework=instr.seen.framework,
            out_of_memory=self.oom,
            memory_limit_bytes=self.config.memory_limit_bytes,
            memory_limit=_read_or_none(self.memory.reading),
            memory_sizes=self.memory_sizes,
            memory_limit_peak_bytes=_read_or_none(self.memory.peak_in_use_bytes),
            flops=self.flops,
            flops_note=self.flops_note if self.flops is None else "",
            tf32_matmuls=_tf32_matmuls(),
            compilation=instr.dynamo.compilation(),
            **cost_facts(self, micro_per_step),  # the run's length, energy, start-up
        )


def loss_check(losses: list[tuple[int, torch.Tensor]]) -> Optional[LossCheck]:
    """Whether the losses passed to backward() were finite: one read of them all at the run's end (one sync on a
    GPU, none per step)."""
    if not losses:
        return None
    try:
        values = torch.stack([loss.float() for _, loss in losses]).cpu().tolist()
    except Exception:  # losses on different devices, or a device gone after an error: unknown, not a failure
        return None
    bad = [i for i, v in enumerate(values) if not math.isfinite(v)]
    if not bad:
        return LossCheck(checked=len(values))
    first = bad[0]
    finite = [v for v in values[:first] if math.isfinite(v)]
    return LossCheck(checked=len(values), first_nonfinite_step=losses[first][0], nonfinite_value=str(values[first]),
                     last_finite=finite[-1] if finite else None, nonfinite_count=len(bad))


def _tf32_matmuls() -> bool:
    """Whether float32 matrix products may run as TF32 (allow_tf32, or set_float32_matmul_precision("high")): on a
    GPU with TF32 units their peak is the TF32 one."""
    try:
        return bool(torch.backends.cuda.matmul.allow_tf32) or torch.get_float32_matmul_precision() != "highest"
    except Exception:
        return False


def _usual(counts: list[int]) -> int:
    """The most common count (the larger on a tie); 1 when none."""
    return max(set(counts), key=lambda c: (counts.count(c), c)) if counts else 1


def _read_or_none(read):
    try:
        return read()
    except Exception:
        return None


DISTRIBUTED_ENV = "DIAGNOSE_DISTRIBUTED"  # set by `diagnose run --nproc-per-node` and `diagnose capture`


def current_rank() -> Optional[int]:
    """This process's rank when it is one of several launched by torchrun (or the user's launcher), else None."""
    rank = os.environ.get("RANK")
    if os.environ.get(DISTRIBUTED_ENV) != "1" or rank is None or not rank.isdigit():
        return None
    return int(rank)


def agreed_by_ranks(step: int, *values: float) -> tuple[float, ...]:
    """The largest of each value over the ranks, so that every rank decides alike (every rank calls this at the same
    step boundary). Through the job's key-value store (torchrun's TCPStore), not a collective: no device, no NCCL
    communicator, nothing in the script's streams. This rank's own values where it is no rank of a group that is
    up, or the store does not answer."""
    if current_rank() is None:
        return values
    import torch.distributed as dist
    if not dist.is_available() or not dist.is_initialized():
        return values
    try:
        from torch.distributed.distributed_c10d import _get_default_store

        store, prefix = _get_default_store(), f"diagnose/plan/{step}/"
        store.set(prefix + str(dist.get_rank()), json.dumps(values))
        keys = [prefix + str(rank) for rank in range(dist.get_world_size())]
        store.wait(keys, datetime.timedelta(seconds=AGREE_TIMEOUT_S))
        seen = [json.loads(store.get(key)) for key in keys]
        return tuple(max(float(v[i]) for v in seen) for i in range(len(values)))
    except Exception:  # a store we cannot use: as before, each rank on its own figures
        return values


AGREE_TIMEOUT_S = 300  # a rank this much later to a step boundary than its peers is stuck in their collectives


def progress_writer():
    """Progress lines for the parent: over an inherited pipe, or (ranks under torchrun, which closes inherited
    descriptors) through a named pipe that only rank 0 writes."""
    stream = None
    fd, path = os.environ.get("DIAGNOSE_PROGRESS_FD"), os.environ.get("DIAGNOSE_PROGRESS_PATH")
    try:
        if path and current_rank() in (None, 0):
            stream = open(path, "w", buffering=1)
        elif fd and current_rank() is None:
            stream = os.fdopen(int(fd), "w", buffering=1)
    except OSError:
        stream = None

    lock = threading.Lock()  # the main thread and the start-up watch both write lines

    def write(line: str) -> None:
        if stream is not None:
            try:
                with lock:
                    stream.write(line + "\n")
            except OSError:
                pass

    return write


def child_paths(run_dir: Path) -> tuple[RunConfig, Path, Path, Optional[int]]:
    """The config, where this process writes its files and its trace, and its rank. A rank of several writes its
    files into RUN/ranks/rankN and its trace, named after its rank, into the shared RUN/tb."""
    record = RunRecord(run_dir)
    config = record.config()
    rank = current_rank()
    files_dir, trace_dir = run_dir, record.files.tb
    if rank is not None:
        files_dir = record.rank(rank).path
        files_dir.mkdir(parents=True, exist_ok=True)
    return config, files_dir, trace_dir, rank


def run_child(run_dir: Path) -> int:
    """One profiled process of the capture (timed runs have their own entry: diagnose.experiments.child)."""
    config, files_dir, trace_dir, rank = child_paths(run_dir)
    return Session(config, files_dir, progress_writer(), trace_dir, f"rank{rank or 0}").run()
