"""Thin, guarded access to live GPU facts (NVML, torch.cuda). Everything degrades to None on a CPU machine.

No machine that builds diagnose has a GPU: keep this module small, and test what samples become elsewhere.
"""
from __future__ import annotations

from typing import Optional

import torch


def cuda_ready() -> bool:
    try:
        return torch.cuda.is_available()
    except Exception:
        return False


def device_in_use() -> bool:
    """The script has initialised CUDA (never initialises it itself)."""
    try:
        return cuda_ready() and torch.cuda.is_initialized()
    except Exception:
        return False


def sync_device() -> bool:
    """Wait for the GPU work queued so far on every visible device (the edges of a timed window: CUDA is
    asynchronous, and a GPU-bound loop's host runs a launch queue ahead). False when nothing was synchronised."""
    if not device_in_use():
        return False
    try:
        for device in range(torch.cuda.device_count()):
            torch.cuda.synchronize(device)
        return True
    except Exception:  # the script's own CUDA error: its error is reported, not ours
        return False


def device_facts() -> dict:
    """Name, total memory and compute capability of the GPU the script uses, or {}.

    Never initialises CUDA itself (that would pin a device before the script's own CUDA_VISIBLE_DEVICES and
    make every run look like a GPU run): torch's view once the script has used CUDA, NVML's before."""
    if not cuda_ready():
        return {}
    try:
        if torch.cuda.is_initialized():
            props = torch.cuda.get_device_properties(torch.cuda.current_device())
            return {"gpu_name": props.name, "gpu_memory_bytes": int(props.total_memory),
                    "gpu_capability": f"{props.major}.{props.minor}", "uuid": str(getattr(props, "uuid", "") or "")}
        return Nvml().facts()
    except Exception:
        return {}


def peak_memory() -> tuple[Optional[int], Optional[int]]:
    """(max reserved bytes, device capacity bytes) when CUDA was used by the script, else (None, None)."""
    try:
        if not (cuda_ready() and torch.cuda.is_initialized()):
            return None, None
        return int(torch.cuda.max_memory_reserved()), int(torch.cuda.mem_get_info()[1])
    except Exception:
        return None, None


ALLOCATOR_STATS = {"num_alloc_retries": "alloc_retries", "num_ooms": "ooms",
                   "allocated_bytes.all.peak": "peak_allocated_bytes", "reserved_bytes.all.peak": "peak_reserved_bytes"}


def allocator_stats() -> dict[str, int]:
    """The CUDA caching allocator's counters that the memory rules read, or {} without CUDA in use."""
    try:
        if not (cuda_ready() and torch.cuda.is_initialized()):
            return {}
        stats = torch.cuda.memory_stats()
        return {ours: int(stats[theirs]) for theirs, ours in ALLOCATOR_STATS.items() if theirs in stats}
    except Exception:
        return {}


class Nvml:
    """One NVML device handle; every reading returns None when NVML is missing or fails."""

    def __init__(self):
        self.handle = None
        self.status = "unavailable: no CUDA device"
        if not cuda_ready():
            return
        try:
            import pynvml

            pynvml.nvmlInit()
            self.nvml = pynvml
            self.handle = self._handle_for(_visible_device())
            self.status = "available"
        except Exception as exc:  # no driver, no library, no permission: all mean "unavailable"
            self.status = f"unavailable: {exc}"

    def _handle_for(self, device: str):
        """NVML handle of the first device CUDA_VISIBLE_DEVICES shows (NVML numbers all devices)."""
        if device.startswith(("GPU-", "MIG-")):
            return self.nvml.nvmlDeviceGetHandleByUUID(device)
        return self.nvml.nvmlDeviceGetHandleByIndex(int(device) if device.isdigit() else 0)

    def facts(self) -> dict:
        if self.handle is None:
            return {}
        n = self.nvml
        name = self._read(n.nvmlDeviceGetName)
        memory = self._read(n.nvmlDeviceGetMemoryInfo)
        capability = self._read(n.nvmlDeviceGetCudaComputeCapability)
        return {"gpu_name": name.decode() if isinstance(name, bytes) else name,
                "gpu_memory_bytes": int(memory.total) if memory is not None else None,
                "gpu_capability": f"{capability[0]}.{capability[1]}" if capability else None}

    def _read(self, fn, *args):
        if self.handle is None:
            return None
        try:
            return fn(self.handle, *args)
        except Exception:
            return None

    def sample(self) -> dict:
        if self.handle is None:
            return {}
        n = self.nvml
        util = self._read(n.nvmlDeviceGetUtilizationRates)
        mem = self._read(n.nvmlDeviceGetMemoryInfo)
        rx = self._read(n.nvmlDeviceGetPcieThroughput, n.NVML_PCIE_UTIL_RX_BYTES)
        tx = self._read(n.nvmlDeviceGetPcieThroughput, n.NVML_PCIE_UTIL_TX_BYTES)
        power = self._read(n.nvmlDeviceGetPowerUsage)
        clock = self._read(n.nvmlDeviceGetClockInfo, n.NVML_CLOCK_SM)
        return {
            "gpu_util_frac": util.gpu / 100.0 if util is not None else None,
            "gpu_mem_used_bytes": int(mem.used) if mem is not None else None,
            "gpu_mem_total_bytes": int(mem.total) if mem is not None else None,
            "pcie_rx_bytes_s": rx * 1024.0 if rx is not None else None,  # NVML reports KB/s
            "pcie_tx_bytes_s": tx * 1024.0 if tx is not None else None,
            "power_w": power / 1000.0 if power is not None else None,  # NVML reports mW
            "sm_clock_mhz": float(clock) if clock is not None else None,
        }


def _visible_device() -> str:
    import os

    return os.environ.get("CUDA_VISIBLE_DEVICES", "0").split(",")[0].strip() or "0"
