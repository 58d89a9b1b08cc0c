"""A child the kernel's OOM killer took: it vanishes with SIGKILL, no Python error and no capture written. The
cgroup's count of OOM kills rising over the run says that it was memory (a cgroup's memory.max reached, or the
machine's); the run is then diagnosed as out of memory, against the cgroup's limit."""
from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import Optional

from diagnose.capture.limits import MACHINE, cgroup_candidates, choose, oom_kill_count
from diagnose.model import Capture, LimitCandidate, MemoryLimitReading, OutOfMemory, RunConfig, ScriptError, Status


class OomKillWatch:
    """The cgroup's OOM kill count before a child starts, to compare when it ends."""

    def __init__(self):
        self.before = oom_kill_count()
        self.started = time.monotonic()

    def killed(self, returncode: Optional[int]) -> bool:
        """The child died of SIGKILL while the cgroup's OOM kill count rose."""
        if returncode != -signal.SIGKILL or self.before is None:
            return False
        after = oom_kill_count()
        return after is not None and after > self.before


def worker_was_oom_killed(exc: BaseException, kills_before: Optional[int]) -> bool:
    """A DataLoader worker that died while the cgroup's OOM kill count rose since the script started: it ran out
    of memory. Its death shows as torch's "DataLoader worker (pid N) is killed by signal: Killed" (or "...
    exited unexpectedly"), or, killed mid-batch, as whatever error the loader's next() met (a reset connection)."""
    if kills_before is None or not (_says_worker_died(exc) or _raised_in_a_loader(exc)):
        return False
    after = oom_kill_count()
    return after is not None and after > kills_before


def _says_worker_died(exc: BaseException) -> bool:
    text = str(exc)
    return "DataLoader worker" in text and ("Killed" in text or "exited unexpectedly" in text)


def _raised_in_a_loader(exc: BaseException) -> bool:
    """The error came out of a DataLoader's iterator (its frames are in torch/utils/data/dataloader.py)."""
    tb = exc.__traceback__
    while tb is not None:
        if tb.tb_frame.f_code.co_filename.endswith(os.path.join("torch", "utils", "data", "dataloader.py")):
            return True
        tb = tb.tb_next
    return False


def cgroup_reading(machine_bytes: int) -> MemoryLimitReading:
    """The limit an OOM kill was against: the tightest cgroup limit, else the machine's memory."""
    candidates = cgroup_candidates() or [LimitCandidate("the machine's memory", machine_bytes, MACHINE)]
    return choose(candidates, lambda c: c.limit_bytes)


def oom_killed_capture(config: RunConfig, watch: OomKillWatch) -> Capture:
    """What the parent knows of a capture child the OOM killer took: its configuration, how long it ran, and the
    limit it was killed against."""
    from diagnose.capture.environment import environment  # torch: only on this path, `diagnose run` has it loaded

    env = environment()
    reading = cgroup_reading(env.total_memory_bytes)
    oom = OutOfMemory(step=None, phase="other", requested_bytes=None, in_use_bytes=None,
                      limit_bytes=reading.limit_bytes, limit_source=reading.source, device="cpu")
    message = (f"the process was killed by the kernel's OOM killer (SIGKILL; the cgroup's oom_kill count rose), "
               f"against {reading.source}")
    return Capture(script=config.script, script_args=config.script_args, step_source=None, steps_seen=0,
                   steps_profiled=0, warmup_steps=config.warmup_steps, wall_s=time.monotonic() - watch.started,
                   environment=env, status=Status.OUT_OF_MEMORY, error=ScriptError("Killed", message, message, None),
                   out_of_memory=oom, memory_limit=reading, memory_limit_bytes=config.memory_limit_bytes)


def write_killed_capture(config: RunConfig, run_dir: Path, watch: OomKillWatch) -> Capture:
    from diagnose.record.run_record import RunRecord

    capture = oom_killed_capture(config, watch)
    RunRecord(run_dir).save_capture(capture)
    return capture
