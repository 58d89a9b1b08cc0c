"""Parent side of a capture: check the script, start the child, relay its output and progress, enforce the
deadline, and hand back what the child wrote."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import traceback
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable, Optional

from diagnose.capture import sandbox
from diagnose.capture.killed import OomKillWatch, write_killed_capture
from diagnose.capture.orphans import PARENT_ENV
from diagnose.errors import UserError
from diagnose.model import Capture, RunConfig, Status
from diagnose.record.run_record import RunRecord
from diagnose.resources import PACKAGE_DIR

KILL_GRACE_S = 90.0  # the child needs time after its deadline to write the trace


@dataclass(frozen=True)
class CaptureOutcome:
    capture: Optional[Capture]
    exit_code: int
    interrupted: bool
    oom_killed: bool = False  # the kernel's OOM killer took the child (SIGKILL, the cgroup's oom_kill count rose)


def check_script(path: str) -> None:
    script = Path(path)
    if not script.exists():
        raise UserError(f"script not found: {path}", "check the path; it is taken relative to the current folder")
    if not script.is_file():
        raise UserError(f"not a file: {path}", "pass the training script itself, e.g. `diagnose run train.py`")
    if script.name.endswith((".json", ".json.gz", ".gz")):  # a JSON object even parses as Python
        raise UserError(f"{path} is not a Python script: it looks like a trace",
                        f"diagnose traces you already have with `diagnose analyze {path}`")
    try:
        source = script.read_bytes()
        compile(source, str(script), "exec")
    except SyntaxError as exc:
        detail = "".join(traceback.format_exception_only(type(exc), exc)).rstrip()
        raise UserError(f"the script has a syntax error, so it cannot run:\n{detail}",
                        "fix the line above and run again")
    except (OSError, ValueError) as exc:
        raise UserError(f"cannot read {path}: {exc}")


def child_env(progress_fd: int, extra: tuple[tuple[str, str], ...] = ()) -> dict[str, str]:
    env = {**os.environ, **dict(extra)}
    env["DIAGNOSE_PROGRESS_FD"] = str(progress_fd)
    env[PARENT_ENV] = str(os.getpid())  # the child stops when this process dies (orphans.stop_with_parent)
    env.setdefault("PYTHONUNBUFFERED", "1")
    package_root = str(PACKAGE_DIR.parent)
    if "site-packages" not in package_root:  # running from a source checkout: let the child import us too
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [env.get("PYTHONPATH"), package_root]))
    return env


def _relay(stream, sink: Callable[[str], None], log) -> None:
    for line in iter(stream.readline, ""):
        log.write(line)
        log.flush()
        try:
            sink(line.rstrip("\n"))
        except Exception:  # a closed terminal must not stop the draining: the child would block on a full pipe
            pass


PROFILED_ENTRY = "diagnose.capture.child"


def run_in_child(config: RunConfig, run_dir: Path, on_output: Callable[[str, bool], None],
                on_progress: Callable[[str], None], entry: str = PROFILED_ENTRY) -> CaptureOutcome:
    """Runs the script in a child process (`python -m ENTRY RUN_DIR`, one per rank under torchrun): the profiled
    capture, or a timed run when the experiments pass their own entry."""
    run_dir = run_dir.resolve()  # the script may chdir; the child must still find its run folder
    record = RunRecord(run_dir)
    record.save_config(config)
    folder = record.files.sandbox
    files = sandbox.prepare(folder, [Path.cwd(), Path(config.script).parent], sandbox.exempt_folders(run_dir))
    env = (*config.environment, (sandbox.STATE_ENV, str(files.state)))
    outcome = None
    try:
        with _stops_as_interrupts():
            run = _run_ranks if config.launcher else _run_one
            outcome = run(config, run_dir, on_output, on_progress, entry, env, (files.owner_fd,))
    finally:
        with _signals_held():
            restored = _restore(folder)
            sandbox.release(files)
        if restored.unrestored and (outcome is None or outcome.capture is None):  # no report will say it
            on_output(f"diagnose: your files, not restored: {'; '.join(restored.unrestored)}", True)
    return _with_restore(outcome, restored, record)


class _stops_as_interrupts:
    """SIGTERM and SIGHUP (a job's time limit, a closed terminal) stop the parent as Ctrl-C does: the child is
    told to stop and the user's files are restored before the parent goes."""

    def __enter__(self):
        self.previous = {}
        for sig in (signal.SIGTERM, signal.SIGHUP):
            try:
                self.previous[sig] = signal.signal(sig, _raise_interrupt)
            except ValueError:  # not the main thread: signals go to the main thread's handlers anyway
                pass

    def __exit__(self, *exc):
        for sig, handler in self.previous.items():
            signal.signal(sig, handler)


def _raise_interrupt(signum, frame):
    raise KeyboardInterrupt


class _signals_held:
    """Ctrl-C, SIGTERM and SIGHUP wait while the user's files are put back: after, not half-way."""
    HELD = {signal.SIGINT, signal.SIGTERM, signal.SIGHUP}

    def __enter__(self):
        self.previous = signal.pthread_sigmask(signal.SIG_BLOCK, self.HELD)

    def __exit__(self, *exc):
        signal.pthread_sigmask(signal.SIG_SETMASK, self.previous)


def restore_abandoned(runs_roots: list[Path]) -> list[str]:
    """Put back the user's files that earlier runs made from this folder left changed, their diagnose killed
    outright before it could restore them (see sandbox.claim_abandoned). One line to print for each such run."""
    lines = []
    for root in dict.fromkeys(r.resolve() for r in runs_roots):
        for files in sandbox.claim_abandoned(root, Path.cwd()):
            try:
                result = _restore(files.dir)
            finally:
                sandbox.release(files)
            done = (f"put back {len(result.restored)} of your files and folders" if result.restored
                    else "nothing to put back")
            moved = f"; the versions it found are in {files.dir}" if result.kept else ""
            left = f"; not restored: {'; '.join(result.unrestored)}" if result.unrestored else ""
            lines.append(f"diagnose: an earlier run ({files.dir.parent}) was stopped before it restored your files: "
                         f"{done}{moved}{left}")
    return lines


def _restore(folder: Path) -> sandbox.RestoreResult:
    """The user's folders as they were, whatever became of the child (a kill leaves its journal behind)."""
    try:
        return sandbox.restore(folder) or sandbox.RestoreResult({}, (), ())
    except Exception as exc:  # a damaged state file: the results still get written, the originals are named
        return sandbox.RestoreResult({}, (), (f"could not restore your files: {exc}; the originals are in "
                                              f"{sandbox.SandboxFiles(folder).originals}",))


def _with_restore(outcome: CaptureOutcome, restored: sandbox.RestoreResult, record: RunRecord) -> CaptureOutcome:
    if outcome.capture is None:
        return outcome
    capture = replace(outcome.capture, redirected_writes={**outcome.capture.redirected_writes, **restored.kept},
                      restored_files=tuple(sorted({*outcome.capture.restored_files, *restored.restored})),
                      unrestored_files=restored.unrestored)
    if record.has_capture():
        record.save_capture(capture)
    return replace(outcome, capture=capture)


def _run_one(config: RunConfig, run_dir: Path, on_output, on_progress, entry: str,
             env: tuple[tuple[str, str], ...], keep_fds: tuple[int, ...] = ()) -> CaptureOutcome:
    read_fd, write_fd = os.pipe()
    watch = OomKillWatch()
    cmd = [sys.executable, "-m", entry, str(run_dir)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, bufsize=1,
                            errors="replace", pass_fds=(write_fd, *keep_fds), env=child_env(write_fd, env))
    os.close(write_fd)
    threads = _start_relays(proc, run_dir, os.fdopen(read_fd, "r", errors="replace"), on_output, on_progress)
    interrupted = _wait(proc, (config.startup_seconds or 0) + config.max_seconds + KILL_GRACE_S)
    for t in threads:
        t.join(timeout=5)
    capture = RunRecord(run_dir).capture()
    killed = watch.killed(proc.returncode)
    if killed and capture is None and entry == PROFILED_ENTRY:  # no Python error to read: the kill is the diagnosis
        capture = write_killed_capture(config, run_dir, watch)
        on_output(f"diagnose: {capture.error.message}", True)
    return CaptureOutcome(capture, proc.returncode,
                          interrupted or (capture is not None and capture.status == Status.INTERRUPTED), killed)


def _run_ranks(config: RunConfig, run_dir: Path, on_output, on_progress, entry: str,
               extra_env: tuple[tuple[str, str], ...], keep_fds: tuple[int, ...] = ()) -> CaptureOutcome:
    """One process per rank through torchrun, each running the capture child; rank 0 reports progress through
    a named pipe (torchrun does not pass inherited descriptors on). torchrun gets its own process group, so a
    deadline can stop it and every rank together."""
    from diagnose.capture.session import DISTRIBUTED_ENV

    record = RunRecord(run_dir)
    fifo = record.files.progress_fifo
    os.mkfifo(fifo)
    env = {**child_env(-1, extra_env), DISTRIBUTED_ENV: "1", "DIAGNOSE_PROGRESS_PATH": str(fifo)}
    env.pop("DIAGNOSE_PROGRESS_FD")
    cmd = [sys.executable, "-m", "diagnose.capture.launch", *config.launcher, "-m", entry, str(run_dir)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, bufsize=1,
                            errors="replace", env=env, start_new_session=True, pass_fds=keep_fds)
    threads = _start_relays(proc, run_dir, _FifoLines(fifo), on_output, on_progress)
    interrupted = _wait(proc, (config.startup_seconds or 0) + config.max_seconds + KILL_GRACE_S, group=True)
    _FifoLines.release(fifo)
    for t in threads:
        t.join(timeout=5)
    fifo.unlink(missing_ok=True)
    capture = record.merge_rank_captures()
    return CaptureOutcome(capture, proc.returncode,
                          interrupted or (capture is not None and capture.status == Status.INTERRUPTED))


class _FifoLines:
    """Lines from a named pipe, opened lazily (opening blocks until a writer comes)."""

    def __init__(self, path: Path):
        self.path = path

    def __iter__(self):
        with open(self.path, "r", errors="replace") as stream:
            yield from stream

    @staticmethod
    def release(path: Path) -> None:
        """Unblock a reader still waiting for a writer that never came (rank 0 failed early)."""
        try:
            os.close(os.open(path, os.O_WRONLY | os.O_NONBLOCK))
        except OSError:
            pass  # no reader waiting: nothing to release


def _start_relays(proc, run_dir: Path, progress, on_output, on_progress) -> list[threading.Thread]:
    log = open(RunRecord(run_dir).files.script_log, "w", encoding="utf-8", errors="replace")
    threads = [
        threading.Thread(target=_relay, args=(proc.stdout, lambda s: on_output(s, False), log), daemon=True),
        threading.Thread(target=_relay, args=(proc.stderr, lambda s: on_output(s, True), log), daemon=True),
        threading.Thread(target=lambda: [on_progress(line.strip()) for line in progress], daemon=True),
    ]
    for t in threads:
        t.start()
    return threads


def _wait(proc: subprocess.Popen, hard_limit_s: float, group: bool = False) -> bool:
    """Wait for the child; on Ctrl-C let it write partial results (it got SIGINT too, or torchrun passes it on),
    on a second one kill it. `group`: the child leads its own process group (torchrun and its ranks)."""
    interrupted = False

    def kill() -> None:
        if group:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        proc.kill()
        proc.wait()

    try:
        proc.wait(timeout=hard_limit_s)
    except subprocess.TimeoutExpired:
        kill()
    except KeyboardInterrupt:
        interrupted = True
        try:
            proc.send_signal(signal.SIGINT)
            proc.wait(timeout=60)
        except (KeyboardInterrupt, subprocess.TimeoutExpired):
            kill()
    return interrupted
