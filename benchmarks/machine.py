"""The machine and the commit a benchmark ran on, as short strings for the results files (benchmarks/results/).

    machine()  "2-core AMD EPYC, 24 GiB": logical CPUs this process may use, the CPU model, the memory
    commit()   the short hash of this checkout's HEAD, "-dirty" when tracked files have uncommitted changes
               (the results files and the README's tables aside)

Usage: python benchmarks/machine.py   (prints both)
"""
from __future__ import annotations

import os
import platform
import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# what a benchmark writes is not the code it timed: a second compare.py --record before the first's records are
# committed is not "-dirty"
NOT_CODE = (":(exclude)benchmarks/results", ":(exclude)benchmarks/README.md")


def cpu_model() -> str:
    """/proc/cpuinfo's model name, less its trademarks and frequency ("Intel(R) Xeon(R) CPU @ 2.20GHz" ->
    "Intel Xeon CPU")."""
    model = ""
    try:
        with open("/proc/cpuinfo") as info:
            model = next((line.split(":", 1)[1].strip() for line in info if line.startswith("model name")), "")
    except OSError:
        pass
    model = model or platform.processor() or platform.machine() or "unknown CPU"
    model = re.sub(r"\((R|TM|tm|r)\)", "", model)
    model = re.sub(r"\s*@\s*[\d.]+\s*GHz", "", model)
    model = re.sub(r"\s+\d+-Core Processor", "", model)
    return " ".join(model.split())


def cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def memory_gib() -> int | None:
    try:
        with open("/proc/meminfo") as info:
            kib = next(int(line.split()[1]) for line in info if line.startswith("MemTotal:"))
    except (OSError, StopIteration, ValueError):
        return None
    return round(kib / 2 ** 20)


def machine() -> str:
    memory = memory_gib()
    return f"{cores()}-core {cpu_model()}" + (f", {memory} GiB" if memory else "")


def commit(root: Path = ROOT) -> str:
    try:
        head = subprocess.run(["git", "rev-parse", "--short=7", "HEAD"], capture_output=True, text=True, cwd=root,
                              timeout=30).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no", "--", ".", *NOT_CODE],
                               capture_output=True, text=True, cwd=root, timeout=30).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    return (head or "unknown") + ("-dirty" if dirty else "")


if __name__ == "__main__":
    print(f"machine: {machine()}\ncommit:  {commit()}")
