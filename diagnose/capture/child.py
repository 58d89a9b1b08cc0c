"""Runs inside the child process: instrument torch, run the user's script as `python SCRIPT ARGS` would,
profile the chosen steps, stop the script, and write RUN/capture.json, samples.json, stacks.json, tb/."""
from __future__ import annotations

import os
import platform
import signal
import sys
import threading
import time
import traceback
from pathlib import Path
from typing import Optional

# `python -m diagnose.capture.child` put the cwd first on sys.path; the script's folder goes there instead.
_CWD_ENTRY = sys.path.pop(0) if sys.path and sys.path[0] in ("", os.getcwd()) else None

import psutil  # noqa: E402
import torch  # noqa: E402

from diagnose.capture import probe  # noqa: E402
from diagnose.capture.gpu import device_facts, peak_memory  # noqa: E402
from diagnose.capture.instrument import Instrumentation, StopCapture  # noqa: E402
from diagnose.capture.sampler import StackSampler, SystemSampler  # noqa: E402
from diagnose.capture.sandbox import WriteSandbox  # noqa: E402
from diagnose.model import Capture, Environment, RunConfig, ScriptError  # noqa: E402
from diagnose.serial import read_json, write_json  # noqa: E402

EXIT_CODES = {"completed": 0, "script_finished": 0, "timeout": 0, "no_steps": 3, "script_error": 1, "interrupted": 130}


class Session:
    def __init__(self, config: RunConfig, run_dir: Path, progress):
        self.config, self.run_dir, self.progress = config, run_dir, progress
        self.t0 = time.monotonic()
        self.instr = Instrumentation(self.on_boundary)
        self.profiler: Optional[torch.profiler.profile] = None
        self.step_span = None
        self.profiled = 0
        self.boundaries_s: list[float] = []
        self.sync_mark_ns: Optional[int] = None
        self.window: list[float] = []
        self.system = SystemSampler(self.t0)
        self.stacks = StackSampler(threading.main_thread().ident)

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
                raise StopCapture("completed")
        if self.profiler is not None:
            self._mark_step(step)

    def _start_profiler(self) -> None:
        activities = [torch.profiler.ProfilerActivity.CPU]
        if torch.cuda.is_available():
            activities.append(torch.profiler.ProfilerActivity.CUDA)
        self.profiler = torch.profiler.profile(
            activities=activities, record_shapes=True, profile_memory=True, with_stack=True,
            on_trace_ready=torch.profiler.tensorboard_trace_handler(str(self.run_dir / "tb"), worker_name="rank0"),
        )
        self.profiler.start()
        for _ in range(2):  # the first record_function after start is slow; the second one is the mark
            self.sync_mark_ns = time.monotonic_ns()
            with torch.profiler.record_function("diagnose::clock_sync"):
                pass
        self.window = [time.monotonic() - self.t0]
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
        self.window.append(time.monotonic() - self.t0)
        profiler, self.profiler = self.profiler, None
        self.progress("writing trace")
        profiler.stop()

    # -- running the script -------------------------------------------------------------------------
    def run(self) -> int:
        script = os.path.realpath(self.config.script)
        sys.argv = [self.config.script, *self.config.script_args]
        sys.path.insert(0, os.path.dirname(script))
        self.instr.install()
        self.sandbox = WriteSandbox([Path.cwd(), Path(script).parent], self.run_dir / "sandbox", [self.run_dir])
        self.sandbox.install()
        self.system.start()
        self.stacks.start()
        self._arm_deadline()
        status, error = self._run_script(script)
        return self.finish(status, error)

    def _arm_deadline(self) -> None:
        def on_deadline(signum, frame):
            raise StopCapture("timeout")

        signal.signal(signal.SIGUSR1, on_deadline)
        signal.signal(signal.SIGTERM, on_deadline)
        self.timer = threading.Timer(self.config.max_seconds, os.kill, (os.getpid(), signal.SIGUSR1))
        self.timer.daemon = True
        self.timer.start()

    def _run_script(self, script: str) -> tuple[str, Optional[ScriptError]]:
        import runpy

        try:
            runpy.run_path(script, run_name="__main__")
            return "script_finished", None
        except StopCapture as stop:
            return stop.reason, None
        except KeyboardInterrupt:
            return "interrupted", None
        except SystemExit as exc:
            if exc.code in (None, 0):
                return "script_finished", None
            return "script_error", self._script_error(exc)
        except BaseException as exc:  # the user's own error: report it as theirs
            return "script_error", self._script_error(exc)

    def _script_error(self, exc: BaseException) -> ScriptError:
        text = user_traceback(exc)
        if not isinstance(exc, SystemExit):
            sys.stderr.write(text)
            sys.stderr.flush()
        message = str(exc.code) if isinstance(exc, SystemExit) else str(exc)
        step = self.instr.clock.boundaries - 1 if self.instr.clock.boundaries else None
        return ScriptError(type(exc).__name__, message, text, step)

    # -- finishing ----------------------------------------------------------------------------------
    def finish(self, status: str, error: Optional[ScriptError]) -> int:
        self.timer.cancel()
        for sig in (signal.SIGUSR1, signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, signal.SIG_IGN)  # a late deadline or Ctrl-C must not cut the files short
        last_complete = self.profiler is None
        if self.profiler is not None:
            self._stop_profiler()
        self.instr.uninstall()
        self.sandbox.uninstall()
        if self.instr.clock.boundaries == 0 and status in ("timeout", "script_finished", "completed"):
            status = "no_steps"
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
        loader = instr.seen.loaders_alive[train] if train is not None else None
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
            optimizers=tuple(instr.seen.optimizers),
            model=instr.model_info(),
            dataset_probe=probe.probe_dataset(loader.dataset) if loader is not None else None,
            trace_files=tuple(sorted(str(p.relative_to(self.run_dir)) for p in (self.run_dir / "tb").glob("*.json*"))),
            counters=dict(instr.seen.counters),
            peak_memory_bytes=peak,
            memory_capacity_bytes=capacity,
            memory_kind=kind,
            error=error,
            redirected_writes=self.sandbox.written(),
            skipped_removals=tuple(self.sandbox.skipped_removals),
        )


def user_traceback(exc: BaseException) -> str:
    """The traceback as `python SCRIPT` would print it: without diagnose's and runpy's frames."""
    ours = (os.path.dirname(os.path.dirname(__file__)), os.path.dirname(__import__("runpy").__file__) + "/runpy.py")
    te = traceback.TracebackException.from_exception(exc)
    te.stack = traceback.StackSummary.from_list([f for f in te.stack if not f.filename.startswith(ours)])
    return "".join(te.format())


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


def _progress_writer():
    fd = os.environ.get("DIAGNOSE_PROGRESS_FD")
    stream = os.fdopen(int(fd), "w", buffering=1) if fd else None

    def write(line: str) -> None:
        if stream is not None:
            try:
                stream.write(line + "\n")
            except OSError:
                pass

    return write


def main() -> None:
    run_dir = Path(sys.argv[1])
    config = read_json(run_dir / "config.json", RunConfig)
    code = Session(config, run_dir, _progress_writer()).run()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)  # user threads or DataLoader workers must not keep the process alive


if __name__ == "__main__":
    main()
