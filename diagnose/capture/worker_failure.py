"""A DataLoader worker that died: which way it died, and what was around it, so the cause can be named.

torch reports a dead worker as "DataLoader worker (pid N) is killed by signal: <name>" (or "exited unexpectedly
with exit code N"); killed mid-batch, the main process may only see the reset connection its batch came through.
The signal says most: SIGKILL is the out-of-memory killer or a container's memory limit; SIGBUS a /dev/shm too
small for the batches in flight (Docker's default is 64 MB); SIGSEGV or SIGABRT a crash in native code. Beside it,
what decides between them: the batches in flight (one batch's bytes x workers x prefetch_factor) against
/dev/shm, and the machine's available memory when it happened."""
from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Any, Optional

import psutil
import torch

from diagnose.capture.sampler import MemorySample
from diagnose.model import LoaderInfo, ScriptError, WorkerFailure

SHM = "/dev/shm"
SPARE_MEMORY = 0.10  # a SIGKILL with more of the machine's memory available than this was not the machine's OOM
SIGNAL = re.compile(r"DataLoader worker \(pid(?:\(s\))? [\d, ]+\) is killed by signal: ([\w ]+)")
PIDS = re.compile(r"DataLoader worker \(pid(?:\(s\))? ([\d, ]+)\)")
EXIT = re.compile(r"DataLoader worker \(pid(?:\(s\))? [\d, ]+\) exited unexpectedly(?: with exit code (-?\d+))?")
SIGNAL_NAMES = {9: "Killed", 7: "Bus error", 11: "Segmentation fault", 6: "Aborted"}  # as torch names them
MID_BATCH = ("Connection reset by peer", "ConnectionResetError", "EOFError", "Broken pipe")
BUS = ("Bus error", "bus error", "shared memory", "shm")

CAUSES = {
    "memory": ("killed with SIGKILL: the kernel's out-of-memory killer or a container's memory limit (cgroup)",
               "fewer workers or a smaller prefetch_factor, less memory per item (decode lazily, no per-worker copies "
               "of big tables), or a larger memory limit for the container or job"),
    "killed": ("killed with SIGKILL while the machine still had memory to spare: a container's or job's memory "
               "limit (cgroup: its memory.events counts oom_kill), or a scheduler or person killing it",
               "check the container's or job's memory limit and its OOM kills (dmesg, memory.events); fewer workers or "
               "a smaller prefetch_factor lower what the workers hold"),
    "shared-memory": ("a /dev/shm too small for the batches in flight (SIGBUS): workers pass batches through it",
                      "a larger /dev/shm (Docker: --shm-size=8g or --ipc=host; Kubernetes: an emptyDir with medium "
                      "Memory at /dev/shm), fewer workers or a smaller prefetch_factor, or "
                      "torch.multiprocessing.set_sharing_strategy('file_system')"),
    "native-crash": ("a crash in native code in the worker (SIGSEGV or SIGABRT): an image or audio library, or a "
                     "library not safe to use after fork",
                     "run with num_workers=0 to see the error in the main process, with faulthandler on "
                     "(python -X faulthandler); set the library's own threads to 1 (cv2.setNumThreads(0)) or use "
                     "multiprocessing_context='spawn'"),
    "unknown": ("the worker died without a signal torch could name (killed mid-batch: its connection reset)",
                "run with num_workers=0 to see whether an item fails, and watch the workers' memory"),
}


def batch_bytes(batch: Any) -> int:
    """Bytes of the tensors in a batch (nested tuples, lists and dicts)."""
    if isinstance(batch, torch.Tensor):
        return batch.numel() * batch.element_size()
    if isinstance(batch, dict):
        return sum(batch_bytes(v) for v in batch.values())
    if isinstance(batch, (list, tuple)):
        return sum(batch_bytes(v) for v in batch)
    return 0


@dataclass(frozen=True)
class Surroundings:
    """What was around the death: the last seconds' memory samples, the cgroup's OOM kills during the run and its
    tightest memory limit (None where there is no cgroup to read)."""
    recent_memory: tuple[MemorySample, ...] = ()
    oom_kills: Optional[int] = None
    cgroup_limit_bytes: Optional[int] = None


def worker_failure(error: Optional[ScriptError], loader: Optional[LoaderInfo], one_batch_bytes: Optional[int],
                   around: Surroundings = Surroundings()) -> Optional[WorkerFailure]:
    """The failure when the script's error is a DataLoader worker's death (None otherwise)."""
    if error is None or loader is None or not loader.num_workers:
        return None
    text = f"{error.message}\n{error.traceback}"
    signal_name, exit_code = _signal(text), _exit_code(text)
    killed = [c for c in error.worker_exit_codes if c < 0]
    if signal_name is None and killed:
        signal_name = SIGNAL_NAMES.get(-killed[0], f"signal {-killed[0]}")
    elif exit_code is None and error.worker_exit_codes and not killed:
        exit_code = error.worker_exit_codes[0]
    if signal_name is None and not EXIT.search(text) and not _mid_batch(error, text):
        return None
    in_flight = (one_batch_bytes * loader.num_workers * (loader.prefetch_factor or 2)) if one_batch_bytes else None
    shm_total, shm_free = _shm()
    before = last_memory_of(dead_worker_pids(text, around.recent_memory), around.recent_memory)
    # the memory before the death decides: the kill gave back what the worker held
    machine = psutil.virtual_memory()
    available = before.available_bytes if before else machine.available
    cause = _cause(signal_name, text, in_flight, shm_total)
    if cause == "memory" and available > SPARE_MEMORY * machine.total and not around.oom_kills:
        cause = "killed"
    why, fix = CAUSES[cause]
    return WorkerFailure(signal=signal_name or "", exit_code=exit_code, step=error.step, cause=cause, why=why,
                         fix=fix, workers=loader.num_workers, prefetch_factor=loader.prefetch_factor or 2,
                         batch_bytes=one_batch_bytes, in_flight_bytes=in_flight, shm_bytes=shm_total,
                         shm_free_bytes=shm_free, available_memory_bytes=int(available),
                         worker_rss_bytes=before.worker_rss_bytes if before else None,
                         workers_rss_bytes=before.workers_rss_bytes if before else None,
                         seconds_before=before.seconds_before if before else None,
                         oom_kills=around.oom_kills, cgroup_limit_bytes=around.cgroup_limit_bytes)


@dataclass(frozen=True)
class MemoryBefore:
    worker_rss_bytes: Optional[int]  # the dead worker's, at its last sample
    workers_rss_bytes: int  # the main process's children together, at that sample
    available_bytes: int  # the machine's, at that sample
    seconds_before: float  # how long before the last sample that one was


def dead_worker_pids(text: str, recent: tuple[MemorySample, ...]) -> set[int]:
    """The workers torch names as dead, else the sampled children that no longer exist."""
    named = {int(pid) for found in PIDS.finditer(text) for pid in re.findall(r"\d+", found.group(1))}
    if named:
        return named
    main = os.getpid()
    seen = {pid for sample in recent for pid in sample.rss_by_pid if pid != main}
    return {pid for pid in seen if not psutil.pid_exists(pid)}


def last_memory_of(dead: set[int], recent: tuple[MemorySample, ...]) -> Optional[MemoryBefore]:
    """The last sample that still saw a dead worker alive (else the last sample, if any): a killed worker not yet
    reaped is still listed, with nothing resident."""
    if not recent:
        return None
    sample = next((s for s in reversed(recent) if any(s.rss_by_pid.get(pid) for pid in dead)), recent[-1])
    main = os.getpid()
    held = [sample.rss_by_pid[pid] for pid in dead if pid in sample.rss_by_pid]
    return MemoryBefore(worker_rss_bytes=max(held) if held else None,
                        workers_rss_bytes=sum(r for pid, r in sample.rss_by_pid.items() if pid != main),
                        available_bytes=sample.available_bytes, seconds_before=recent[-1].t_s - sample.t_s)


def _signal(text: str) -> Optional[str]:
    found = SIGNAL.search(text)
    if found:
        return found.group(1).strip()
    return "Bus error" if "unexpected bus error" in text.lower() else None


def _exit_code(text: str) -> Optional[int]:
    found = EXIT.search(text)
    return int(found.group(1)) if found and found.group(1) else None


def _mid_batch(error: ScriptError, text: str) -> bool:
    """A reset connection raised from inside the DataLoader: the worker that was sending its batch is gone."""
    return any(m in text for m in MID_BATCH) and "torch/utils/data" in error.traceback


def _cause(signal_name: Optional[str], text: str, in_flight: Optional[int], shm_total: Optional[int]) -> str:
    if signal_name == "Killed":
        return "memory"
    if signal_name == "Bus error" or any(b in text for b in BUS):
        return "shared-memory"
    if signal_name in ("Segmentation fault", "Aborted"):
        return "native-crash"
    if in_flight and shm_total and in_flight >= shm_total:
        return "shared-memory"
    return "unknown"


def _shm() -> tuple[Optional[int], Optional[int]]:
    try:
        stats = os.statvfs(SHM)
    except OSError:
        return None, None
    return stats.f_blocks * stats.f_frsize, stats.f_bavail * stats.f_frsize
