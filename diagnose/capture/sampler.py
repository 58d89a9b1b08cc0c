"""Background samplers: system usage (psutil, NVML) at ~10 Hz and main-thread stacks during profiling."""
from __future__ import annotations

import sys
import threading
import time
from collections import deque
from dataclasses import dataclass
from typing import Optional

import psutil

from diagnose.capture.device import Nvml
from diagnose.capture.sites import is_framework_file, user_location
from diagnose.model import Samples, StackSamples

GPU_FIELDS = ("gpu_util_frac", "gpu_mem_used_bytes", "pcie_rx_bytes_s", "pcie_tx_bytes_s", "power_w", "sm_clock_mhz")


RECENT_MEMORY_SAMPLES = 50  # 5 s at 10 Hz


@dataclass(frozen=True)
class MemorySample:
    t_s: float
    rss_by_pid: dict[int, int]  # the script's process and its children (DataLoader workers)
    available_bytes: int  # the machine's


class SystemSampler(threading.Thread):
    def __init__(self, t0: float, interval_s: float = 0.1):
        super().__init__(name="diagnose-system-sampler", daemon=True)
        self.t0, self.interval_s = t0, interval_s
        self.stop_event = threading.Event()
        self.rows: list[dict] = []
        self.process = psutil.Process()
        self._procs: dict[int, psutil.Process] = {}
        self.nvml = Nvml()
        self.cpu_count = psutil.cpu_count() or 1
        # the last seconds' memory: each process's RSS and the machine's available memory, for a worker that dies
        self.recent_memory: deque[MemorySample] = deque(maxlen=RECENT_MEMORY_SAMPLES)

    def run(self) -> None:
        psutil.cpu_percent(percpu=True)  # the first call only primes psutil's counters
        while not self.stop_event.wait(self.interval_s):
            try:
                self.rows.append(self._sample())
            except Exception:  # a process that vanished mid-read: skip this sample
                continue

    def _process_tree(self) -> list[psutil.Process]:
        live = [self.process] + self.process.children(recursive=True)
        procs = []
        for p in live:  # reuse Process objects: cpu_percent measures since the object's previous call
            procs.append(self._procs.setdefault(p.pid, p))
        return procs

    def _sample(self) -> dict:
        per_core = [c / 100.0 for c in psutil.cpu_percent(percpu=True)]
        cpu_pct, rss, by_pid = 0.0, 0, {}
        for p in self._process_tree():
            try:
                with p.oneshot():
                    cpu_pct += p.cpu_percent()
                    by_pid[p.pid] = p.memory_info().rss
                    rss += by_pid[p.pid]
            except psutil.Error:
                continue
        t_s = time.monotonic() - self.t0
        self.recent_memory.append(MemorySample(t_s, by_pid, psutil.virtual_memory().available))
        row = {
            "t_s": t_s,
            "per_core_frac": per_core,
            "cpu_frac": sum(per_core) / max(1, len(per_core)),
            "process_cpu_frac": cpu_pct / 100.0 / self.cpu_count,
            "rss_bytes": rss,
        }
        row.update(self.nvml.sample())
        return row

    def finish(self, window_s: Optional[tuple[float, float]]) -> Samples:
        self.stop_event.set()
        self.join(timeout=2)
        rows = self.rows
        column = lambda key: tuple(r.get(key) for r in rows)  # noqa: E731
        totals = [r.get("gpu_mem_total_bytes") for r in rows if r.get("gpu_mem_total_bytes")]
        gpu_columns = {k: column(k) for k in GPU_FIELDS} if self.nvml.handle is not None else {}
        return Samples(
            t_s=column("t_s"),
            cpu_frac=column("cpu_frac"),
            per_core_frac=tuple(tuple(r["per_core_frac"]) for r in rows),
            process_cpu_frac=column("process_cpu_frac"),
            rss_bytes=column("rss_bytes"),
            gpu_mem_total_bytes=totals[0] if totals else None,
            gpu=self.nvml.status,
            window_s=window_s,
            **gpu_columns,
        )


class StackSampler(threading.Thread):
    """Samples the main thread's innermost user line, to attribute host overhead to source lines."""

    def __init__(self, main_thread_id: int, interval_s: float = 0.002):
        super().__init__(name="diagnose-stack-sampler", daemon=True)
        self.main_thread_id, self.interval_s = main_thread_id, interval_s
        self.active = threading.Event()
        self.stop_event = threading.Event()
        self.t_ns: list[int] = []
        self.locations: list[Optional[str]] = []
        self.in_torch: list[bool] = []

    def run(self) -> None:
        while not self.stop_event.is_set():
            if not self.active.wait(0.05):
                continue
            frame = sys._current_frames().get(self.main_thread_id)
            self.t_ns.append(time.monotonic_ns())
            self.locations.append(user_location(frame))
            self.in_torch.append(frame is not None and is_framework_file(frame.f_code.co_filename))
            del frame
            time.sleep(self.interval_s)

    def finish(self, sync_mark_ns: Optional[int]) -> StackSamples:
        self.stop_event.set()
        self.active.set()
        self.join(timeout=2)
        n = min(len(self.t_ns), len(self.locations), len(self.in_torch))
        return StackSamples(tuple(self.t_ns[:n]), tuple(self.locations[:n]), tuple(self.in_torch[:n]), sync_mark_ns)
