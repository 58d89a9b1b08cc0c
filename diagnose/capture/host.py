"""Runs the user's script inside the child process as `python SCRIPT ARGS` would, with diagnose's hooks, a
deadline and the write sandbox. Subclasses decide what a step boundary does and what is written at the end."""
from __future__ import annotations

import os
import signal
import sys
import threading
import time
import traceback
from dataclasses import replace
from pathlib import Path
from typing import Optional

import psutil

from diagnose.capture import hang
from diagnose.capture.instrument import Instrumentation, StopCapture
from diagnose.capture.killed import cgroup_reading, worker_was_oom_killed
from diagnose.capture.limits import oom_kill_count
from diagnose.capture.memory import MemoryLimit, apply_memory_limit, is_out_of_memory, out_of_memory
from diagnose.capture.sandbox import WriteSandbox, exempt_folders
from diagnose.model import OutOfMemory, RunConfig, ScriptError, Status
from diagnose.record.run_record import RunRecord

# A real-time signal for the deadline: SIGUSR1 is often taken by the script itself (e.g. SLURM requeue handlers).
DEADLINE_SIGNAL = getattr(signal, "SIGRTMIN", signal.SIGUSR1) + (2 if hasattr(signal, "SIGRTMIN") else 0)
STOP_SIGNALS = {signal.SIGINT, signal.SIGTERM, DEADLINE_SIGNAL}
# The deadline's handler has not run this long after its signal: the main thread waits in native code (a gloo or NCCL
# collective, a CUDA sync, a C++ future), which does not return to Python for signal handlers.
NATIVE_WAIT_GRACE_S = 10.0
NATIVE_WAIT_LOOKS = 6  # looks again while diagnose's own code runs (writing a trace holds the signal back)


class signals_held:
    """Hold Ctrl-C and the deadline while a trace is written: they arrive afterwards, not half-way."""

    def __enter__(self):
        self.previous = signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)

    def __exit__(self, *exc):
        signal.pthread_sigmask(signal.SIG_SETMASK, self.previous)


class ScriptHost:
    """Runs the user's script with diagnose's hooks, a deadline and the write sandbox; subclasses decide what
    happens at each step boundary and what gets written at the end."""

    def __init__(self, config: RunConfig, run_dir: Path, progress, instr: Instrumentation):
        self.config, self.run_dir, self.progress, self.instr = config, run_dir, progress, instr
        self.t0 = time.monotonic()
        self.stop_reason: Optional[str] = None
        self.script_running = False  # stop signals raise only while the script runs, never in our own handling
        self.memory = MemoryLimit(None, "cpu")
        self.oom: Optional[OutOfMemory] = None  # set when the script ran out of memory
        self.first_step_at: Optional[float] = None  # time.monotonic() of the first step boundary
        # the stacks when the deadline came (main thread, then the others' innermost lines), and when it came
        self.deadline_stacks: Optional[tuple[tuple[str, ...], tuple[str, ...]]] = None
        self.deadline_at: Optional[float] = None
        self.native_wait = False  # the deadline found the main thread in native code: finished from another thread

    def boundary(self, count: int) -> None:
        """Called by the hooks at each step boundary (main thread only)."""
        compiled_s = self.instr.dynamo.seconds()
        if self.first_step_at is None:
            self.first_step_at = time.monotonic()
            self.compile_s_at_first_step = compiled_s
            if self.config.startup_seconds is not None:  # start-up is over: --max-seconds counts from here
                self._start_timer(self.config.max_seconds)
            self.on_first_step()
        elif compiled_s > self.compile_s_counted and self.stop_reason is None:
            # recompiling is not training: like start-up, it does not count against --max-seconds
            self.compile_s_counted = compiled_s  # first: the time left is measured without this compile too
            self._start_timer(max(self.config.max_seconds - self.measured_s(), 0.001))
        self.compile_s_counted = compiled_s
        if self.stop_reason is None and self.measured_s() > self.config.max_seconds:
            self.stop_reason = Status.TIMEOUT  # also checked here: the script may handle the deadline signal itself
        if self.stop_reason is not None:
            raise StopCapture(self.stop_reason)  # again and again: a bare `except:` in the script cannot keep it
        self.on_boundary(count)

    compile_s_at_first_step = 0.0
    compile_s_counted = 0.0

    def measured_s(self) -> float:
        """Seconds of the part --max-seconds bounds: from the first step when start-up has a limit of its own,
        less the time torch.compile spent recompiling since (read at the last step boundary)."""
        start = self.t0 if self.config.startup_seconds is None or self.first_step_at is None else self.first_step_at
        compiled = self.compile_s_counted - self.compile_s_at_first_step if self.first_step_at is not None else 0.0
        return time.monotonic() - start - compiled

    def on_first_step(self) -> None:
        pass

    def on_deadline_stacks(self) -> None:
        """The main thread's stack was read at the deadline: what else to read while the script still waits."""

    def usual_step_s(self) -> Optional[float]:
        """A step's usual length so far (None: not known)."""
        return None

    def stop(self, reason: str) -> None:
        self.stop_reason = reason
        raise StopCapture(reason)

    def on_stop_signal(self, reason: str) -> None:
        """A deadline or SIGTERM: it stops the script where it is, or, when the script has ended already (a rank
        whose collective failed as its peer died, say), it is only recorded, so that its results are still kept."""
        if self.script_running:
            self.stop(reason)
        self.stop_reason = self.stop_reason or reason

    def on_boundary(self, count: int) -> None:
        raise NotImplementedError

    def own_dirs(self) -> list[Path]:
        """Folders diagnose itself writes in: the sandbox leaves writes there alone."""
        return [self.run_dir]

    def finish(self, status: str, error: Optional[ScriptError]) -> int:
        raise NotImplementedError

    def start_samplers(self) -> None:
        pass

    # -- running the script -------------------------------------------------------------------------
    def run(self) -> int:
        script = os.path.realpath(self.config.script)
        sys.argv = [self.config.script, *self.config.script_args]
        sys.path.insert(0, os.path.dirname(script))
        self.instr.install()
        # in this process alone (no parent restoring: `diagnose capture` in a rank the user launched), only the
        # paths the script's Python touches are protected: its peers write in the same folders meanwhile
        self.sandbox = WriteSandbox([Path.cwd(), Path(script).parent], RunRecord(self.run_dir).files.sandbox,
                                    [*self.own_dirs(), *exempt_folders(self.run_dir)], listed=False)
        self.sandbox.install()
        self.start_samplers()
        self.oom_kills_at_start = oom_kill_count()  # a worker the OOM killer takes raises no MemoryError
        self.memory = apply_memory_limit(self.config.memory_limit_bytes)  # last: our own set-up is outside it
        self._arm_deadline()
        status, error = self._run_script(self.config.script)
        self.memory.release()  # the script is over: writing the results must not run out of its memory
        self.timer.cancel()
        for sig in (DEADLINE_SIGNAL, signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, signal.SIG_IGN)  # a late deadline or Ctrl-C must not cut the files short
        quiet_worker_deaths()
        self.instr.uninstall()
        self.sandbox.uninstall()
        if self.instr.steps.boundaries == 0 and Status.is_ok(status):
            status = Status.NO_STEPS
        return self.finish(status, error)

    def _arm_deadline(self) -> None:
        def on_deadline(signum, frame):
            if self.script_running and self.deadline_stacks is None:
                self.deadline_at = time.monotonic()
                self._take_deadline_stacks(frame)  # where the script was: a step that never ends waits here
            self.on_stop_signal(Status.TIMEOUT)

        def on_terminate(signum, frame):  # e.g. torchrun stopping the other ranks after one failed
            self.on_stop_signal(Status.STOPPED)

        signal.signal(DEADLINE_SIGNAL, on_deadline)
        signal.signal(signal.SIGTERM, on_terminate)
        first = self.config.startup_seconds
        self._start_timer(first if first is not None else self.config.max_seconds)

    def _start_timer(self, seconds: float) -> None:
        previous = getattr(self, "timer", None)
        if previous is not None:
            previous.cancel()
        self.timer = threading.Timer(seconds, self._deadline)
        self.timer.name = "diagnose-deadline"
        self.timer.daemon = True
        self.timer.start()

    def _deadline(self) -> None:
        self.deadline_at = time.monotonic()
        # to the main thread itself: sent to the process, the kernel may hand it to another thread (gloo's, say), and
        # the main thread's wait (a sleep, a select) is then never interrupted for the handler
        signal.pthread_kill(threading.main_thread().ident, DEADLINE_SIGNAL)
        self._look_for_native_wait(NATIVE_WAIT_LOOKS)

    def _look_for_native_wait(self, looks_left: int) -> None:
        step_s = self.usual_step_s() or 0.0  # a long step's own native work must not pass for a wait
        watch = threading.Timer(max(NATIVE_WAIT_GRACE_S, 3 * step_s), self._native_wait_check, (looks_left,))
        watch.name, watch.daemon = "diagnose-native-wait", True
        watch.start()

    def _native_wait_check(self, looks_left: int) -> None:
        """The handler never ran, so the main thread cannot be stopped: say where it waits, write what was measured
        from this thread, and end the process (its main thread never comes back to Python)."""
        if not self.script_running or self.deadline_stacks is not None:
            return  # the handler ran (the script is stopping), or the script had ended
        frame = sys._current_frames().get(threading.main_thread().ident)
        if frame is None or hang.in_diagnose(frame):
            if looks_left > 1:  # diagnose's own work holds the signal back for now
                self._look_for_native_wait(looks_left - 1)
            return
        self.native_wait = True
        self._take_deadline_stacks(frame)
        code = self.finish(Status.TIMEOUT, None)
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)

    def _take_deadline_stacks(self, frame) -> None:
        self.deadline_stacks = hang.snapshot(frame)
        self.on_deadline_stacks()

    def _run_script(self, script: str) -> tuple[str, Optional[ScriptError]]:
        try:
            return self._outcome(script)
        except StopCapture as stop:  # landed in the instant between the script's end and script_running's reset
            self.script_running = False
            return stop.reason, None
        except KeyboardInterrupt:  # Ctrl-C while the script's own error was being read: keep what was measured
            self.script_running = False
            return Status.INTERRUPTED, None
        except RuntimeError as late:
            # a DataLoader worker's death, raised by torch's SIGCHLD handler while the error it caused (a reset
            # connection mid-batch) was being read: that death is the script's error
            if "DataLoader worker" not in str(late):
                raise
            self.script_running = False
            return self._failed(late)

    def _outcome(self, script: str) -> tuple[str, Optional[ScriptError]]:
        import runpy

        try:
            self.script_running = True
            self.script_started_at = time.monotonic()  # the script's first line: its own start-up begins
            runpy.run_path(script, run_name="__main__")
            self.script_running = False
            return Status.SCRIPT_FINISHED, None
        except StopCapture as stop:
            self.script_running = False
            return stop.reason, None
        except KeyboardInterrupt:
            self.script_running = False
            return Status.INTERRUPTED, None
        except SystemExit as exc:
            self.script_running = False
            if exc.code in (None, 0):
                return Status.SCRIPT_FINISHED, None
            return Status.SCRIPT_ERROR, self._script_error(exc)
        except BaseException as exc:  # the user's own error: report it as theirs
            self.script_running = False
            quiet_worker_deaths()
            return self._failed(exc)

    def _failed(self, exc: BaseException) -> tuple[str, Optional[ScriptError]]:
        """The script's own error, as its status: out of memory (an allocator's error, or a DataLoader worker the
        OOM killer took) is a diagnosis, any other a script error."""
        worker_killed = worker_was_oom_killed(exc, getattr(self, "oom_kills_at_start", None))
        if is_out_of_memory(exc) or worker_killed:  # the most common way training fails: a diagnosis
            phase, started = self.instr.current_phase(), self.instr.steps.boundaries
            # the first step has no boundary yet while it runs (the training loader is known after its backward)
            step = started - 1 if started else (0 if phase != "other" else None)
            self.oom = out_of_memory(exc, step, phase, self.memory)
            if worker_killed:  # the cgroup's limit killed it, whatever limit the main process had
                reading = cgroup_reading(psutil.virtual_memory().total)
                self.oom = replace(self.oom, phase="data", limit_bytes=reading.limit_bytes,
                                   limit_source=reading.source)
            return Status.OUT_OF_MEMORY, self._script_error(exc)
        return Status.SCRIPT_ERROR, self._script_error(exc)

    def _script_error(self, exc: BaseException) -> ScriptError:
        text = user_traceback(exc)
        if not isinstance(exc, SystemExit):
            sys.stderr.write(text)
            sys.stderr.flush()
        message = str(exc.code) if isinstance(exc, SystemExit) else str(exc)
        step = self.instr.steps.boundaries - 1 if self.instr.steps.boundaries else None
        return ScriptError(type(exc).__name__, message, text, step, worker_exit_codes(exc))


def worker_exit_codes(exc: BaseException) -> tuple[int, ...]:
    """The exit codes of the DataLoader workers whose iterator the error came through (its frames still hold it):
    a worker killed mid-batch shows in the main process only as a reset connection, its signal only here."""
    tb = exc.__traceback__
    while tb is not None:
        workers = getattr(tb.tb_frame.f_locals.get("self"), "_workers", None)
        if isinstance(workers, list) and workers:
            codes = []
            for worker in workers:
                worker.join(timeout=0.5)  # a worker killed a moment ago may not have been reaped yet
                if worker.exitcode is not None and worker.exitcode != 0:
                    codes.append(worker.exitcode)
            return tuple(codes)
        tb = tb.tb_next
    return ()


def quiet_worker_deaths() -> None:
    """The script is over: its DataLoader's SIGCHLD handler (which raises 'worker is killed' in the main thread at
    whatever line runs) must not fire inside diagnose's own handling of its error, or the run loses its capture."""
    try:
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    except (ValueError, OSError, AttributeError):  # not the main thread, or no SIGCHLD here
        pass


def user_traceback(exc: BaseException) -> str:
    """The traceback as `python SCRIPT` would print it: without diagnose's and runpy's frames."""
    ours = os.path.dirname(os.path.dirname(__file__))
    te = traceback.TracebackException.from_exception(exc)
    te.stack = traceback.StackSummary.from_list(
        [f for f in te.stack if not f.filename.startswith(ours) and "runpy" not in f.filename])
    return "".join(te.format())
