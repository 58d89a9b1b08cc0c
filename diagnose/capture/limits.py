"""Which memory limit applies to the script, read and named: the smallest of --memory-limit, the process's
address-space and data limits (RLIMIT_AS / RLIMIT_DATA: `ulimit -v`, a batch system), its cgroup's memory.max /
memory.high (v2) or memory.limit_in_bytes (v1) and every ancestor's (containers, Slurm's cgroup plugin), and the
machine's memory; on CUDA the device's total less what other processes hold (NVML), or a MIG slice's size.
Also the cgroup's count of OOM kills: a kill is a SIGKILL with no Python error, the count says it was memory.

Pure reads of /proc, /sys/fs/cgroup and getrlimit; DIAGNOSE_CGROUP_ROOT moves the cgroup filesystem (tests)."""
from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Callable, Optional

from diagnose.model import LimitCandidate, MemoryLimitReading

CGROUP_ROOT_ENV = "DIAGNOSE_CGROUP_ROOT"
DEFAULT_CGROUP_ROOT = "/sys/fs/cgroup"
# cgroup v1 writes "no limit" as the largest page-aligned 64-bit number; anything past this is unlimited
V1_UNLIMITED = 2 ** 62
FLAG, RLIMIT, CGROUP, MACHINE, GPU = "flag", "rlimit", "cgroup", "machine", "gpu"


def cgroup_root() -> Path:
    return Path(os.environ.get(CGROUP_ROOT_ENV, DEFAULT_CGROUP_ROOT))


def own_cgroup_paths(proc_cgroup_text: str) -> tuple[Optional[str], Optional[str]]:
    """(v2 path, v1 memory path) from /proc/self/cgroup's lines `ID:CONTROLLERS:PATH`."""
    v2, v1 = None, None
    for line in proc_cgroup_text.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        _, controllers, path = parts
        if controllers == "":
            v2 = path
        elif "memory" in controllers.split(","):
            v1 = path
    return v2, v1


def _read_text(path: Path) -> Optional[str]:
    try:
        return path.read_text()
    except OSError:
        return None


def _limit_value(text: Optional[str]) -> Optional[int]:
    """A cgroup limit file's value in bytes; None for "max", v1's no-limit number, or unreadable."""
    if text is None:
        return None
    value = text.strip()
    if not value.isdigit():
        return None
    number = int(value)
    return number if 0 < number < V1_UNLIMITED else None


def _own_folder(mount: Path, path: Optional[str]) -> Optional[Path]:
    """The process's cgroup folder under a mount. A container sees its own cgroup at the mount's root while
    /proc/self/cgroup still names the host's path: when that path is not there, the root is the cgroup."""
    if path is None or not mount.is_dir():
        return None
    inside = mount / path.lstrip("/")
    return inside if inside.is_dir() else mount


def _ancestry(folder: Path, mount: Path) -> list[Path]:
    """The folder and each parent up to the mount: a parent's limit binds its children too."""
    chain = [folder]
    while chain[-1] != mount and mount in chain[-1].parents:
        chain.append(chain[-1].parent)
    return chain


def cgroup_candidates(root: Optional[Path] = None, proc_cgroup_text: Optional[str] = None) -> list[LimitCandidate]:
    """Every finite memory limit of the process's cgroup and its ancestors (v2 memory.max and memory.high, v1
    memory.limit_in_bytes), each named by its file."""
    root = root or cgroup_root()
    text = proc_cgroup_text if proc_cgroup_text is not None else (_read_text(Path("/proc/self/cgroup")) or "")
    v2_path, v1_path = own_cgroup_paths(text)
    found: list[LimitCandidate] = []
    v2_folder = _own_folder(root, v2_path) if (root / "cgroup.controllers").exists() else None
    if v2_folder is not None:
        for folder in _ancestry(v2_folder, root):
            for name in ("memory.max", "memory.high"):
                value = _limit_value(_read_text(folder / name))
                if value:
                    found.append(LimitCandidate(f"cgroup {name} ({folder / name})", value, CGROUP))
    v1_folder = _own_folder(root / "memory", v1_path)
    if v1_folder is not None:
        for folder in _ancestry(v1_folder, root / "memory"):
            value = _limit_value(_read_text(folder / "memory.limit_in_bytes"))
            if value:
                found.append(LimitCandidate(f"cgroup memory.limit_in_bytes ({folder / 'memory.limit_in_bytes'})",
                                            value, CGROUP))
    return found


def oom_kill_count(root: Optional[Path] = None, proc_cgroup_text: Optional[str] = None) -> Optional[int]:
    """OOM kills in the process's cgroup so far: v2 memory.events `oom_kill`, v1 memory.oom_control `oom_kill`
    (kernels from 4.13); None when neither can be read."""
    root = root or cgroup_root()
    text = proc_cgroup_text if proc_cgroup_text is not None else (_read_text(Path("/proc/self/cgroup")) or "")
    v2_path, v1_path = own_cgroup_paths(text)
    files = []
    v2_folder = _own_folder(root, v2_path) if (root / "cgroup.controllers").exists() else None
    if v2_folder is not None:
        files.append(v2_folder / "memory.events")
    v1_folder = _own_folder(root / "memory", v1_path)
    if v1_folder is not None:
        files.append(v1_folder / "memory.oom_control")
    counts = [int(m.group(1)) for f in files for m in [re.search(r"^oom_kill (\d+)$", _read_text(f) or "", re.M)] if m]
    return sum(counts) if counts else None


def rlimit_candidates(getrlimit: Optional[Callable[[int], tuple[int, int]]] = None) -> list[LimitCandidate]:
    """The soft address-space and data limits, when set (`ulimit -v`, `ulimit -d`, prlimit, a batch system)."""
    import resource

    read = getrlimit or resource.getrlimit
    found = []
    for limit, name in ((resource.RLIMIT_AS, "RLIMIT_AS, ulimit -v"), (resource.RLIMIT_DATA, "RLIMIT_DATA, ulimit -d")):
        soft, _ = read(limit)
        if soft != resource.RLIM_INFINITY and soft > 0:
            found.append(LimitCandidate(name, int(soft), RLIMIT))
    return found


def gpu_candidates(nvml, device_index: int, own_pids: set[int]) -> list[LimitCandidate]:
    """On CUDA: the device's (or its MIG slice's) memory less what other processes hold, as NVML reads it. `nvml`
    is the pynvml module (a mock in the tests: no GPU here)."""
    handle = nvml.nvmlDeviceGetHandleByIndex(device_index)
    source, handle = _mig_slice(nvml, handle) or ("the GPU's memory", handle)
    total = int(nvml.nvmlDeviceGetMemoryInfo(handle).total)
    try:
        processes = nvml.nvmlDeviceGetComputeRunningProcesses(handle)
    except Exception:  # not supported on this device (or a MIG slice without the right): the whole total
        processes = []
    others = sum(int(p.usedGpuMemory or 0) for p in processes if p.pid not in own_pids)
    if others:
        return [LimitCandidate(f"{source} less {_gib(others)} other processes hold (NVML)", total - others, GPU)]
    return [LimitCandidate(source, total, GPU)]


def _mig_slice(nvml, handle):
    """(name, handle) of the MIG slice this process sees, when MIG is on: its size is the limit, not the GPU's."""
    try:
        current, _ = nvml.nvmlDeviceGetMigMode(handle)
    except Exception:  # not a MIG-capable GPU
        return None
    if current != getattr(nvml, "NVML_DEVICE_MIG_ENABLE", 1):
        return None
    try:
        mig = nvml.nvmlDeviceGetMigDeviceHandleByIndex(handle, 0)
    except Exception:
        return None
    return "the MIG slice's memory", mig


def _gib(n: int) -> str:
    return f"{n / 2 ** 30:.1f} GiB"


def choose(candidates: list[LimitCandidate], headroom: Callable[[LimitCandidate], float]) -> MemoryLimitReading:
    """The candidate that leaves the least room (by `headroom`: an address-space limit counts from 0, the flag from
    where the script started), with every candidate kept for the record."""
    best = min(candidates, key=headroom)
    return MemoryLimitReading(best.limit_bytes, best.source, best.kind, tuple(candidates))


def host_limit(flag_bytes: Optional[int], start_vms_bytes: int, machine_bytes: int,
               rlimits: Optional[list[LimitCandidate]] = None,
               cgroups: Optional[list[LimitCandidate]] = None) -> MemoryLimitReading:
    """The limit that applies on the host: --memory-limit (growth from the script's start), the rlimits (the
    whole address space: what is left of it is the room), the cgroups and the machine (resident memory)."""
    candidates = [LimitCandidate("--memory-limit", flag_bytes, FLAG)] if flag_bytes else []
    candidates += rlimit_candidates() if rlimits is None else rlimits
    candidates += cgroup_candidates() if cgroups is None else cgroups
    candidates.append(LimitCandidate("the machine's memory", machine_bytes, MACHINE))

    def headroom(c: LimitCandidate) -> float:
        return c.limit_bytes - start_vms_bytes if c.kind == RLIMIT else c.limit_bytes

    return choose(candidates, headroom)


def cuda_limit(flag_bytes: Optional[int], device_total_bytes: int, device_index: int = 0,
               nvml=None) -> MemoryLimitReading:
    """The limit that applies on a GPU: --memory-limit, else the device's or its MIG slice's memory less what
    other processes hold (NVML when it loads; else the device's total as torch reports it)."""
    candidates = [LimitCandidate("--memory-limit", flag_bytes, FLAG)] if flag_bytes else []
    try:
        if nvml is None:
            import pynvml as nvml

            nvml.nvmlInit()
        candidates += gpu_candidates(nvml, device_index, {os.getpid()})
    except Exception:  # no NVML: torch's figure for the device
        candidates.append(LimitCandidate("the GPU's memory", device_total_bytes, GPU))
    return choose(candidates, lambda c: c.limit_bytes)
