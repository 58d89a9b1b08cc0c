"""The machine's peak, measured: matrix products large enough to reach the plateau, per dtype a step may compute
in (fp32, TF32, bf16, fp16 on a GPU; fp32 and bf16 on the host), and a large copy for memory bandwidth, each for
a fraction of a second with the device synchronised at the edges. Cached per machine (device, driver, torch,
threads) in the user's cache folder, so only the first run on a machine pays for it."""
from __future__ import annotations

import json
import math
import os
import platform
import time
from typing import Callable, Optional

import torch

from diagnose.capture.peak_cache import read_cache, write_cache
from diagnose.model import Peak

SECONDS = 0.25  # per measurement, after one warm-up call
BURSTS = 5  # a matmul peak is the best of this many bursts of SECONDS / 2, a pause between them
PLATEAU_S = 0.02  # a product this long is large enough to run at the device's full rate
CACHE_VERSION = 1


def device_name(device: str) -> str:
    if device == "cuda":
        return torch.cuda.get_device_name(torch.cuda.current_device())
    threads = torch.get_num_threads()
    return f"{_cpu_model()} ({threads} thread{'' if threads == 1 else 's'})"


def cached_machine_peaks(device: str) -> tuple[Peak, ...]:
    """This machine's peaks if measured before, without measuring; () when not. On CUDA () always: naming the
    GPU would start CUDA in the caller, which the experiments' runs need free."""
    if device == "cuda":
        return ()
    return tuple(Peak(**p) for p in read_cache().get(_cache_key(device), ()))


def machine_peaks(device: str, fresh: bool = False, at_least: Optional[dict[str, float]] = None) -> tuple[Peak, ...]:
    """Measured peaks of `device` ("cuda" or "cpu"), from the cache unless `fresh`. `at_least`: dtype -> a rate a
    run achieved past the cached peak; the peak cached is never below it (a measurement on a loaded machine reads
    low, and a step cannot run faster than the device's peak)."""
    key = _cache_key(device)
    cache = read_cache()
    if not fresh and key in cache:
        return tuple(Peak(**p) for p in cache[key])
    peaks = tuple(_at_least(p, (at_least or {}).get(p.dtype)) for p in measure_peaks(device))
    cache[key] = [p.__dict__ for p in peaks]
    write_cache(cache)
    return peaks


def _at_least(peak: Peak, floor: Optional[float]) -> Peak:
    if floor is None or peak.per_s >= floor:
        return peak
    return Peak(peak.device, peak.dtype, floor,
                f"{peak.source}; raised to the rate a run achieved ({floor / peak.per_s:.2f}x)")


def peaks_in_child(device: str, timeout_s: float = 120.0, fresh: bool = False,
                   at_least: Optional[dict[str, float]] = None) -> tuple[Peak, ...]:
    """machine_peaks in a process of its own: the caller keeps no CUDA context (the experiments' runs need the
    GPU's memory) and no thread settings of the measurement; () when it fails."""
    import subprocess
    import sys

    extra = (["--fresh"] if fresh else []) + (["--at-least", json.dumps(at_least)] if at_least else [])
    try:
        done = subprocess.run([sys.executable, "-m", "diagnose.capture.peak", device, *extra], capture_output=True,
                              text=True, timeout=timeout_s, env={**os.environ, "PYTHONPATH": _package_root()})
        return tuple(Peak(**p) for p in json.loads(done.stdout)) if done.returncode == 0 else ()
    except (OSError, ValueError, TypeError, subprocess.TimeoutExpired):
        return ()


def _package_root() -> str:
    from diagnose.resources import PACKAGE_DIR

    root = str(PACKAGE_DIR.parent)
    return os.pathsep.join(filter(None, [os.environ.get("PYTHONPATH"), root]))


def measure_peaks(device: str) -> tuple[Peak, ...]:
    name = device_name(device)
    peaks = [_matmul_peak(device, name, dtype) for dtype in _dtypes(device)]
    peaks.append(_copy_peak(device, name))
    return tuple(p for p in peaks if p is not None)


def _dtypes(device: str) -> tuple[str, ...]:
    if device != "cuda":
        return ("float32", "bfloat16")
    listed = ["float32", "tf32", "float16"]
    if torch.cuda.is_bf16_supported():
        listed.insert(2, "bfloat16")
    return tuple(listed)


def torch_dtype_of(name: str) -> torch.dtype:
    """The tensor dtype a peak is measured in: TF32 is float32 tensors with TF32 matmuls allowed."""
    return torch.float32 if name == "tf32" else getattr(torch, name)


def _matmul_peak(device: str, name: str, dtype: str) -> Optional[Peak]:
    """2n^3 FLOPs per product; n grows until one product takes PLATEAU_S, at most 8192."""
    torch_dtype = torch_dtype_of(dtype)
    tf32 = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = dtype == "tf32"
    try:
        n, per_call = 512, 0.0
        while n <= 8192:
            a = torch.randn(n, n, device=device).to(torch_dtype)
            b = torch.randn(n, n, device=device).to(torch_dtype)
            per_call = _timed(lambda: torch.mm(a, b), device, min_s=0.0)
            if per_call >= PLATEAU_S or n == 8192:
                break
            n *= 2
        per_call = _best_burst(lambda: torch.mm(a, b), device)
        return Peak(name, dtype, 2.0 * n ** 3 / per_call, f"measured: {n}x{n} matmul, best of {BURSTS} bursts")
    except (RuntimeError, TypeError):  # a dtype this device cannot multiply in
        return None
    finally:
        torch.backends.cuda.matmul.allow_tf32 = tf32


def _copy_peak(device: str, name: str) -> Optional[Peak]:
    """Bytes read and written per second by a copy of a tensor much larger than the caches: the best of three
    fresh pairs of tensors (on a virtual machine the same copy ran at 33 or 50 GB/s depending on where the pages
    landed)."""
    size = (1 << 30) if device == "cuda" else (128 << 20)
    try:
        per_call = min(_one_copy(device, size) for _ in range(3))
    except RuntimeError:
        return None
    return Peak(name, "memory", 2.0 * size / per_call, f"measured: copy of {size >> 20} MiB, best of 3")


def _one_copy(device: str, size: int) -> float:
    src = torch.empty(size // 4, dtype=torch.float32, device=device).fill_(1.0)
    dst = torch.empty_like(src)
    return _timed(lambda: dst.copy_(src), device, min_s=SECONDS / 3)


def _best_burst(call: Callable, device: str) -> float:
    """Seconds per call in the best of BURSTS short bursts, 50 ms apart: on a shared 2-core VM one 0.25 s
    measurement in eight read 112 GFLOP/s where the others read 190 to 198 (a neighbour's burst); the best of five
    bursts read 177 to 203."""
    best = math.inf
    for _ in range(BURSTS):
        best = min(best, _timed(call, device, min_s=SECONDS / 2))
        time.sleep(0.05)
    return best


def _timed(call: Callable, device: str, min_s: float) -> float:
    """Seconds per call at the peak: the fastest quarter's slowest call, timed one by one (synchronised) after three
    warm-up calls (thread pools start, clocks ramp up: the first calls ran at 60% of the rate here), over min_s and
    eight calls at least. On a shared machine other work slows some calls; the fastest are the device's own."""
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    for _ in range(3):
        call()
    sync()
    times: list[float] = []
    while sum(times) < min_s or len(times) < 8:
        start = time.perf_counter()
        call()
        sync()
        times.append(time.perf_counter() - start)
    return sorted(times)[len(times) // 4]


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as info:
            for line in info:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _cache_key(device: str) -> str:
    driver = torch.version.cuda if device == "cuda" else ""
    return f"v{CACHE_VERSION}|{device_name(device)}|cuda {driver}|torch {torch.__version__}"


if __name__ == "__main__":
    import sys

    floors = json.loads(sys.argv[sys.argv.index("--at-least") + 1]) if "--at-least" in sys.argv else None
    print(json.dumps([p.__dict__ for p in machine_peaks(sys.argv[1], fresh="--fresh" in sys.argv, at_least=floors)]))
