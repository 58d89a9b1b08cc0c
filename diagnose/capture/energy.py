"""Energy over the timed window: the device's own counters read at the window's two edges.

GPU: NVML's total-energy counter (`nvmlDeviceGetTotalEnergyConsumption`, millijoules since the driver loaded;
Volta and newer). It updates every 20-100 ms, so a window shorter than MIN_COUNTER_WINDOW_S would read mostly its
update steps: such a window (or a device without the counter) integrates the power samples the system sampler
took inside it instead, and with fewer than MIN_POWER_SAMPLES of them there is no figure. Host: RAPL's package
counters (`/sys/class/powercap/intel-rapl:N/energy_uj`, wrapping at `max_energy_range_uj`), where readable (often
root-only, absent in most VMs). What is not readable is said so, never estimated from a datasheet.

Plain nvidia-ml-py, not Zeus: the counter is one call on the NVML handle diagnose already holds for its samples,
while Zeus (`zeus` 0.16) would add pandas, scikit-learn, pydantic, tyro, httpx and amdsmi to the user's training
process; its answer to short windows (instant power x duration) is what the 10 Hz power samples here do better,
and its RAPL reading is the same sysfs files."""
from __future__ import annotations

import os
import re
import time
from dataclasses import replace
from pathlib import Path
from typing import Callable, Optional, Sequence

from diagnose.model import EnergyReading

# 10x NVML's slowest counter update (100 ms): the counter's steps move a window's energy by 10% at most
MIN_COUNTER_WINDOW_S = 1.0
MIN_POWER_SAMPLES = 3  # power samples inside the window to integrate (10 Hz: 0.3 s)
POWERCAP = Path("/sys/class/powercap")
PACKAGE_ZONE = re.compile(r"intel-rapl:\d+$")  # packages; their subzones (core, dram: intel-rapl:0:1) are inside


class NvmlEnergyCounter:
    """The total-energy counter of one NVML device handle (in joules); None when the device has none."""

    def __init__(self, nvml_module, handle):
        self.nvml, self.handle = nvml_module, handle
        self.why_not = ""
        if handle is None:
            self.why_not = "no NVML device"
        elif self.read() is None:
            self.why_not = "this GPU has no total-energy counter (NVML needs Volta or newer)"

    def read(self) -> Optional[float]:
        if self.handle is None:
            return None
        try:
            return self.nvml.nvmlDeviceGetTotalEnergyConsumption(self.handle) / 1000.0
        except Exception:  # not supported, no permission, a driver error: no counter
            return None


class RaplCounters:
    """The host's RAPL package counters (joules), summed, their wraps undone; unavailable with the reason."""

    def __init__(self, root: Path = POWERCAP):
        self.zones: list[Path] = []
        self.why_not = ""
        if not root.is_dir():
            self.why_not = f"no RAPL on this machine: {root} does not exist"
            return
        zones = sorted(p for p in root.iterdir() if PACKAGE_ZONE.match(p.name))
        if not zones:
            self.why_not = f"no RAPL package zone under {root}"
            return
        readable = [z for z in zones if _read_int(z / "energy_uj") is not None]
        if not readable:
            self.why_not = f"RAPL's counters under {root} are not readable by this user (often root-only)"
        self.zones = readable

    def read(self) -> Optional[tuple[int, ...]]:
        values = tuple(_read_int(z / "energy_uj") for z in self.zones)
        return None if not values or None in values else values

    def joules_between(self, start: Sequence[int], end: Sequence[int]) -> float:
        total = 0
        for zone, a, b in zip(self.zones, start, end):
            delta = b - a
            if delta < 0:  # the counter wrapped once (it wraps every few minutes to hours under load)
                delta += _read_int(zone / "max_energy_range_uj") or 0
            total += delta
        return total / 1e6


def _read_int(path: Path) -> Optional[int]:
    try:
        return int(path.read_text().strip())
    except (OSError, ValueError):
        return None


class EnergyMeter:
    """Reads the counters at the timed window's edges (start(), stop()); `readings()` says what they measured.
    A window that restarts (an epoch ended inside it) calls start() again: the last start counts."""

    def __init__(self, nvml_module=None, handle=None, rapl: Optional[RaplCounters] = None,
                 clock: Callable[[], float] = time.monotonic):
        self.gpu = NvmlEnergyCounter(nvml_module, handle) if nvml_module is not None else None
        self.rapl = rapl if rapl is not None else (RaplCounters() if reads_host() else None)
        self.clock = clock
        self.started: Optional[tuple[float, Optional[float], Optional[tuple[int, ...]]]] = None
        self.span: Optional[tuple[float, float, int]] = None  # (start, end, steps), the clock's seconds
        self.gpu_j: Optional[float] = None
        self.host_j: Optional[float] = None
        self.samples: Optional[int] = None

    def start(self) -> None:
        self.span = None
        self.started = (self.clock(), self._gpu_now(), self._host_now())

    def stop(self, steps: int) -> None:
        self.lap(steps)
        self.started = None

    def lap(self, steps: int, samples: Optional[int] = None) -> None:
        """The window from the last start() to now, `steps` long; the start stays for a longer window later."""
        if self.started is None:
            return
        begin, gpu0, host0 = self.started
        end, gpu1, host1 = self.clock(), self._gpu_now(), self._host_now()
        self.span, self.samples = (begin, end, steps), samples
        self.gpu_j = gpu1 - gpu0 if gpu0 is not None and gpu1 is not None else None
        self.host_j = self.rapl.joules_between(host0, host1) if host0 is not None and host1 is not None else None

    def _gpu_now(self) -> Optional[float]:
        return self.gpu.read() if self.gpu is not None and not self.gpu.why_not else None

    def _host_now(self) -> Optional[tuple[int, ...]]:
        return self.rapl.read() if self.rapl is not None and not self.rapl.why_not else None

    def readings(self, power_samples: Sequence[tuple[float, Optional[float]]] = ()) -> tuple[EnergyReading, ...]:
        """The window's energy per domain. `power_samples`: (time on this meter's clock, watts) from the system
        sampler, for a GPU whose counter is missing or whose window is too short for it."""
        if self.span is None:
            return ()
        begin, end, steps = self.span
        seconds = end - begin
        readings = [] if self.gpu is None else [self._gpu_reading(seconds, steps, begin, end, power_samples)]
        if self.rapl is not None:
            readings.append(self._host_reading(seconds, steps))
        return tuple(replace(r, samples=self.samples) for r in readings)

    def _gpu_reading(self, seconds, steps, begin, end, power_samples) -> EnergyReading:
        if self.gpu_j is not None and seconds >= MIN_COUNTER_WINDOW_S:
            return EnergyReading("gpu", self.gpu_j, seconds, steps, "nvml-energy-counter", 1)
        why_counter = self.gpu.why_not or (f"the timed window ({seconds:.2f} s) is shorter than "
                                           f"{MIN_COUNTER_WINDOW_S:g} s, 10x the counter's update period")
        joules = integrate_power(power_samples, begin, end)
        if joules is not None:
            return EnergyReading("gpu", joules, seconds, steps, "nvml-power-samples", 1, note=why_counter)
        return EnergyReading("gpu", None, seconds, steps, "unavailable",
                             note=f"{why_counter}, and fewer than {MIN_POWER_SAMPLES} power samples fell inside it")

    def _host_reading(self, seconds, steps) -> EnergyReading:
        if self.host_j is not None:
            return EnergyReading("host", self.host_j, seconds, steps, "rapl", len(self.rapl.zones))
        return EnergyReading("host", None, seconds, steps, "unavailable", note=self.rapl.why_not or "RAPL not read")


def integrate_power(samples: Sequence[tuple[float, Optional[float]]], begin: float, end: float) -> Optional[float]:
    """Joules from power samples inside [begin, end]: their mean power over the window's length (samples are
    evenly spaced, so the mean is the time average); None with fewer than MIN_POWER_SAMPLES."""
    inside = [w for t, w in samples if begin <= t <= end and w is not None]
    if len(inside) < MIN_POWER_SAMPLES:
        return None
    return sum(inside) / len(inside) * (end - begin)


def reads_host() -> bool:
    """One process per machine reads the host's counters: ranks on one machine share its packages."""
    return os.environ.get("LOCAL_RANK", "0") == "0"

