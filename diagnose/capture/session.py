"""The diagnosis run inside the child process: warm up, profile the chosen steps, stop the script, and write
RUN/capture.json, samples.json, stacks.json and the trace in tb/."""
from __future__ import annotations

import os
import platform
import threading
import time
from pathlib import Path
from typing import Optional

import psutil
import torch

from diagnose.capture import probe
from diagnose.capture.gpu import allocator_stats, device_facts, peak_memory
from diagnose.capture.instrument import Instrumentation
from diagnose.capture.sampler import StackSampler, SystemSampler
from diagnose.capture.host import ScriptHost, signals_held
from diagnose.model import Capture, Environment, RunConfig, ScriptError
from diagnose.serial import read_json, write_json

EXIT_CODES = {"completed": 0, "script_finished": 0, "timeout": 0, "no_steps": 3, "script_error": 1, "interrupted": 130,
              "stopped": 143}


class Session(ScriptHost):
    """The diagnosis run: warm up, profile the chosen steps, stop, write capture.json and the trace."""

    def __init__(self, config: RunConfig, run_dir: Path, progress, trace_dir: Path, worker_name: str = "rank0"):
        super().__init__(config, run_dir, progress, Instrumentation(self.boundary))
        self.trace_dir, self.worker_name = trace_dir, worker_name
        self.profiler: Optional[torch.profiler.profile] = None
        self.step_span = None
        self.profiled = 0
        self.boundaries_s: list[float] = []
        self.sync_mark_ns: Optional[int] = None
        self.window: list[float] = []
        self.system = SystemSampler(self.t0)
        self.stacks = StackSampler(threading.main_thread().ident)

    def own_dirs(self) -> list[Path]:
        return [self.run_dir, self.trace_dir]

    # -- step boundaries ----------------------------------------------------------------------------
    def on_boundary(self, count: int) -> None:
        now = time.monotonic()
        self.boundaries_s.append(now - self.t0)
        step = count - 1  # index of the step that starts now
        warmup, steps = self.config.warmup_steps, self.config.profile_steps
        self.progress(f"step {count} {warmup + steps}")
        if step == warmup:
            self._start_profiler()
        elif warmup < step <= warmup + steps:
            self.profiled += 1
            if step == warmup + steps:
                self._stop_profiler()
                self.stop("completed")
        if self.profiler is not None:
            self._mark_step(step)

    def _start_profiler(self) -> None:
        activities = [torch.profiler.ProfilerActivity.CPU]
        if torch.cuda.is_available():
            activities.append(torch.profiler.ProfilerActivity.CUDA)
        # with_stack is off by default: its Python tracer slows every Python call (2x on a small model's step)
        # and so inflates exactly the host overhead being measured; the stack sampler finds the lines instead.
        profiler = torch.profiler.profile(
            activities=activities, record_shapes=True, profile_memory=True, with_stack=self.config.with_stack,
            on_trace_ready=torch.profiler.tensorboard_trace_handler(str(self.trace_dir), worker_name=self.worker_name),
        )
        profiler.start()
        self.profiler = profiler
        for _ in range(2):  # the first record_function after start is slow; the second one is the mark
            self.sync_mark_ns = time.monotonic_ns()
            with torch.profiler.record_function("diagnose::clock_sync"):
                pass
        self.window = [time.monotonic() - self.t0]
        self.instr.timing = True
        self.stacks.active.set()
        self.progress("profiling")

    def _mark_step(self, step: int) -> None:
        """Close the previous ProfilerStep span and open the next, as profiler.step() does under a schedule."""
        if self.step_span is not None:
            self.step_span.__exit__(None, None, None)
        self.step_span = torch.profiler.record_function(f"ProfilerStep#{step}")
        self.step_span.__enter__()

    def _stop_profiler(self) -> None:
        if self.profiler is None:
            return
        if self.step_span is not None:
            self.step_span.__exit__(None, None, None)
            self.step_span = None
        self.stacks.active.clear()
        self.instr.timing = False
        self.window.append(time.monotonic() - self.t0)
        self.progress("writing trace")
        with signals_held():
            profiler, self.profiler = self.profiler, None
            profiler.stop()

    def start_samplers(self) -> None:
        self.system.start()
        self.stacks.start()

    # -- finishing ----------------------------------------------------------------------------------
    def finish(self, status: str, error: Optional[ScriptError]) -> int:
        last_complete = self.profiler is None
        if self.profiler is not None:
            self._stop_profiler()
        self.progress("probing dataset")
        capture = self._capture(status, error, last_complete)
        write_json(self.run_dir / "samples.json", self.system.finish(tuple(self.window) if len(self.window) == 2 else None))
        write_json(self.run_dir / "stacks.json", self.stacks.finish(self.sync_mark_ns))
        write_json(self.run_dir / "capture.json", capture)
        return EXIT_CODES.get(status, 1)

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
        return Capture(
            status=status,
            script=self.config.script,
            script_args=tuple(self.config.script_args),
            step_source=instr.clock.source,
            steps_seen=instr.clock.boundaries,
            steps_profiled=self.profiled,
            warmup_steps=self.config.warmup_steps,
            wall_s=time.monotonic() - self.t0,
            environment=environment(),
            boundaries_s=tuple(self.boundaries_s),
            last_step_complete=last_complete,
            loaders=instr.loader_infos(),
            train_loader=train,
            wait_loader=wait,
            optimizers=tuple(instr.seen.optimizers),
            model=instr.model_info(),
            dataset_probe=probe.probe_dataset(loader.dataset) if loader is not None else None,
            trace_files=tuple(sorted(str(p.relative_to(self.trace_dir.parent))
                                     for p in self.trace_dir.glob(f"{self.worker_name}.*.json*"))),
            counters=dict(instr.seen.counters),
            peak_memory_bytes=peak,
            memory_capacity_bytes=capacity,
            memory_kind=kind,
            allocator=allocator_stats(),
            error=error,
            redirected_writes=self.sandbox.written(),
            skipped_removals=tuple(self.sandbox.skipped_removals),
        )


def environment() -> Environment:
    facts = device_facts()
    return Environment(
        python=platform.python_version(),
        torch=torch.__version__,
        platform=platform.platform(),
        cpu_count=len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1),
        total_memory_bytes=int(psutil.virtual_memory().total),
        cuda_available=torch.cuda.is_available(),
        gpu_name=facts.get("gpu_name"),
        gpu_memory_bytes=facts.get("gpu_memory_bytes"),
        gpu_capability=facts.get("gpu_capability"),
        nvml=_nvml_status(),
    )


def _nvml_status() -> str:
    from diagnose.capture.gpu import Nvml

    return Nvml().status


DISTRIBUTED_ENV = "DIAGNOSE_DISTRIBUTED"  # set by `diagnose run --nproc-per-node` and `diagnose capture`


def current_rank() -> Optional[int]:
    """This process's rank when it is one of several launched by torchrun (or the user's launcher), else None."""
    rank = os.environ.get("RANK")
    if os.environ.get(DISTRIBUTED_ENV) != "1" or rank is None or not rank.isdigit():
        return None
    return int(rank)


def rank_dir(run_dir: Path, rank: int) -> Path:
    return run_dir / "ranks" / f"rank{rank}"


def _progress_writer():
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

    def write(line: str) -> None:
        if stream is not None:
            try:
                stream.write(line + "\n")
            except OSError:
                pass

    return write


def run_child(run_dir: Path) -> int:
    """One process of the capture. A rank of several writes its files into RUN/ranks/rankN and its trace, named
    after its rank, into the shared RUN/tb."""
    config = read_json(run_dir / "config.json", RunConfig)
    rank = current_rank()
    files_dir, trace_dir = run_dir, run_dir / "tb"
    if rank is not None:
        files_dir = rank_dir(run_dir, rank)
        files_dir.mkdir(parents=True, exist_ok=True)
    if config.measure is not None:
        from diagnose.capture.measure import MeasureSession

        return MeasureSession(config, files_dir, _progress_writer()).run()
    return Session(config, files_dir, _progress_writer(), trace_dir, f"rank{rank or 0}").run()
