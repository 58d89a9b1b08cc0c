"""The machine and software a capture ran on (Python, torch, platform, cores, memory, the GPU and NVML's state): read
once at the end of a run, and by the parent for a run the kernel killed (killed.py)."""
from __future__ import annotations

import os
import platform

import psutil
import torch

from diagnose.capture.device import device_facts
from diagnose.model import Environment


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
    from diagnose.capture.device import Nvml

    return Nvml().status
