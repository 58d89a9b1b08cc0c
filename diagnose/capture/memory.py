"""Memory in the child: a limit to run under (--memory-limit), and an out-of-memory error read as a diagnosis
(which step and phase, the size asked for, how much was in use, against which limit)."""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Optional

import psutil
import torch

from diagnose.capture.limits import FLAG, MACHINE, RLIMIT, cuda_limit, host_limit
from diagnose.model import MemoryLimitReading, MemorySizes, OutOfMemory

# what allocators say when they run out: torch's CPU allocator, CUDA's caching allocator, the OS
OOM_TEXT = ("can't allocate memory", "out of memory", "cannot allocate memory", "not enough memory")
_UNITS = {"B": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "TiB": 2**40}


@dataclass
class MemoryLimit:
    """The limit the script runs under. --memory-limit (`limit_bytes`) is diagnose's to set: CUDA's per-process
    fraction, or on the host the address space the process may grow by from where it stood when the script
    started (an approximation: virtual, not resident). The limit that applies (`reading`) is the smallest of that
    and those the system sets (capture/limits.py); what counts against it follows its kind: the address space
    grown (--memory-limit), the whole address space (RLIMIT_AS / RLIMIT_DATA), resident memory (a cgroup, the
    machine) or the caching allocator's bytes (CUDA)."""
    limit_bytes: Optional[int]
    device: str  # cuda | cpu
    start_vms_bytes: int = 0
    soft_bytes: Optional[int] = None  # the host's address-space limit as set
    released: bool = False  # the script is over: the limit stays lifted
    # the host's address space grown while the limit was lifted (the profiler's start, its event buffers over the
    # profiled steps, the trace's export): diagnose's, not the script's, so it is added to the allowance
    excluded_bytes: int = 0
    lifted_at_vms: Optional[int] = None
    # RLIMIT_AS's soft value before diagnose set one: lifting goes back to it, never above (a `ulimit -v` is the
    # user's; a --memory-limit only ever lowers it)
    outer_soft_bytes: Optional[int] = None
    known: Optional[MemoryLimitReading] = None  # read once (on CUDA when first asked: reading it starts NVML)
    start_in_use_bytes: Optional[int] = None  # what counted against it when the script started

    def reading(self) -> Optional[MemoryLimitReading]:
        if self.known is None and self.device == "cuda":
            try:
                self.known = cuda_limit(self.limit_bytes, _cuda_total_bytes())
            except Exception:  # the device cannot be read (the process is failing): no reading, not a crash
                return None
        return self.known

    def counts(self) -> str:
        """What counts against the limit that applies: 'growth' (--memory-limit on the host), 'address' (an
        rlimit), 'resident' (a cgroup, the machine), 'allocator' (CUDA)."""
        if self.device == "cuda":
            return "allocator"
        reading = self.reading()
        kind = reading.kind if reading is not None else (FLAG if self.limit_bytes else MACHINE)
        return "growth" if kind == FLAG else ("address" if kind == RLIMIT else "resident")

    def peak_in_use_bytes(self) -> Optional[int]:
        """The highest of what counts against the limit since the script started: the allocator's reserved
        bytes on CUDA; on the host the address space's peak (VmPeak: grown since the start under --memory-limit,
        whole under an rlimit), else the resident peak."""
        if self.device == "cuda":
            return int(torch.cuda.max_memory_reserved()) if torch.cuda.is_initialized() else None
        counts = self.counts()
        if counts == "resident":
            import resource

            return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
        try:
            with open("/proc/self/status") as status:
                peak = re.search(r"VmPeak:\s+(\d+) kB", status.read())
        except OSError:
            return None
        if not peak:
            return None
        return int(peak.group(1)) * 1024 - (self.start_vms_bytes + self.excluded_bytes if counts == "growth" else 0)

    def in_use_bytes(self) -> Optional[int]:
        """What counts against the limit now: allocated by torch on CUDA; on the host the address space (grown
        since the start under --memory-limit, whole under an rlimit), else the resident memory."""
        if self.device == "cuda":
            return int(torch.cuda.memory_allocated())
        info = psutil.Process().memory_info()
        counts = self.counts()
        if counts == "growth":
            return int(info.vms - self.start_vms_bytes - self.excluded_bytes)
        return int(info.vms) if counts == "address" else int(info.rss)

    def lift(self, host_only: bool = False) -> None:
        """diagnose's own work (starting and stopping the profiler, writing the trace and the results) is not the
        script's: it runs without the limit, which would otherwise fail it (std::bad_alloc in the profiler). With
        `host_only`, the CUDA limit stays (the profiler's buffers are on the host)."""
        if not self.limit_bytes or (host_only and self.device == "cuda"):
            return
        if self.device == "cpu" and self.lifted_at_vms is None:
            self.lifted_at_vms = int(psutil.Process().memory_info().vms)
        self._set(None)

    def release(self) -> None:
        """The script is over: no limit for what diagnose still does (writing the results)."""
        self.lift()
        self.released = True

    def restore(self) -> None:
        if not self.limit_bytes or self.released:
            return
        if self.lifted_at_vms is not None:  # what grew meanwhile was diagnose's: the script keeps its allowance
            self.excluded_bytes += max(0, int(psutil.Process().memory_info().vms) - self.lifted_at_vms)
            self.lifted_at_vms = None
        self._set(self.limit_bytes)

    def _set(self, limit_bytes: Optional[int]) -> None:
        if self.device == "cuda":
            _cuda_fraction(limit_bytes)
            return
        import resource

        _, hard = resource.getrlimit(resource.RLIMIT_AS)
        outer = self.outer_soft_bytes if self.outer_soft_bytes is not None else hard
        soft = self.soft_bytes + self.excluded_bytes if limit_bytes and self.soft_bytes else outer
        if outer != resource.RLIM_INFINITY:
            soft = min(soft, outer)
        resource.setrlimit(resource.RLIMIT_AS, (soft if hard == resource.RLIM_INFINITY else min(soft, hard), hard))


def _cuda_fraction(limit_bytes: Optional[int]) -> None:
    """The caching allocator's per-process share of the GPU: the limit's, or the whole GPU (None)."""
    total = torch.cuda.get_device_properties(torch.cuda.current_device()).total_memory
    torch.cuda.set_per_process_memory_fraction(min(1.0, limit_bytes / total) if limit_bytes else 1.0)


def _cuda_total_bytes() -> int:
    return int(torch.cuda.get_device_properties(torch.cuda.current_device()).total_memory)


def apply_memory_limit(limit_bytes: Optional[int]) -> MemoryLimit:
    """The limit from now on: on the host, the address space may grow by limit_bytes from where it stands; and
    the limit that applies, read (on CUDA when first asked)."""
    if torch.cuda.is_available():
        limit = MemoryLimit(limit_bytes, "cuda")
    else:
        import resource

        start = int(psutil.Process().memory_info().vms)
        outer, _ = resource.getrlimit(resource.RLIMIT_AS)
        limit = MemoryLimit(limit_bytes, "cpu", start, start + limit_bytes if limit_bytes else None,
                            outer_soft_bytes=outer)
        limit.known = host_limit(limit_bytes, start, int(psutil.virtual_memory().total))
        limit.start_in_use_bytes = limit.in_use_bytes()
    limit.restore()  # sets it, when there is one (capped by the hard limit as every later restore is)
    return limit


def is_out_of_memory(exc: BaseException) -> bool:
    if isinstance(exc, MemoryError):
        return True
    oom = getattr(torch, "OutOfMemoryError", None) or getattr(torch.cuda, "OutOfMemoryError", None)
    if oom is not None and isinstance(exc, oom):
        return True
    return isinstance(exc, RuntimeError) and any(text in str(exc).lower() for text in OOM_TEXT)


def requested_bytes(message: str) -> Optional[int]:
    """The size the failed allocation asked for, from the allocator's message."""
    cpu = re.search(r"tried to allocate (\d+) bytes", message)
    if cpu:
        return int(cpu.group(1))
    cuda = re.search(r"Tried to allocate ([\d.]+) ([KMGT]?i?B)", message)
    if cuda and cuda.group(2) in _UNITS:
        return int(float(cuda.group(1)) * _UNITS[cuda.group(2)])
    return None


def out_of_memory(exc: BaseException, step: Optional[int], phase: str, limit: MemoryLimit) -> OutOfMemory:
    device = "cuda" if "CUDA" in str(exc) or type(exc).__name__ == "OutOfMemoryError" else "cpu"
    reading = limit.reading() if limit.device == device else None
    try:
        if reading is None:
            reading = MemoryLimitReading(_cuda_total_bytes() if device == "cuda" else psutil.virtual_memory().total,
                                         "the GPU's memory" if device == "cuda" else "the machine's memory", MACHINE)
        in_use = limit.in_use_bytes() if limit.device == device else int(psutil.Process().memory_info().rss)
    except Exception:  # the process is short of memory: a figure we cannot read is left out
        in_use = None
    return OutOfMemory(step=step, phase=phase, requested_bytes=requested_bytes(str(exc)), in_use_bytes=in_use,
                       limit_bytes=reading.limit_bytes if reading else None,
                       limit_source=reading.source if reading else "", device=device,
                       start_bytes=limit.start_in_use_bytes if limit.device == device else None)


class StepMemory:
    """Sizes measured over the first training step (from the script's start to the second step boundary; or to
    the error when it ran out of memory): the tensors every step holds (parameters, their gradients, the
    optimizer's state, buffers), the bytes autograd saved for backward (through saved-tensor hooks: unique
    storages, parameters left out), every live tensor between steps, and on CUDA the allocator's peak so far."""

    def __init__(self, module_of):
        self.module_of = module_of  # the model is found at its first forward, after this starts
        self.saved: dict[int, int] = {}
        self.param_ptrs: Optional[set[int]] = None
        self.hooks = torch.autograd.graph.saved_tensors_hooks(self._pack, _unpack)
        self.hooks.__enter__()
        self.open = True

    def _pack(self, tensor):
        try:  # must never fail: it runs inside the user's forward
            if self.param_ptrs is None:
                self.param_ptrs = {_ptr(p) for p in _parameters(self.module_of(), ())}
            storage = tensor.untyped_storage()
            ptr = storage.data_ptr()
            if ptr not in self.param_ptrs and ptr not in self.saved:
                self.saved[ptr] = storage.nbytes()
        except Exception:
            pass
        return tensor

    def close(self) -> None:
        if self.open:
            self.open = False
            self.hooks.__exit__(None, None, None)

    def finish(self, optimizers: list) -> MemorySizes:
        self.close()
        module = self.module_of()
        device = _device_of(module)
        params = _parameters(module, optimizers)
        on_cuda = device == "cuda" and torch.cuda.is_initialized()
        return MemorySizes(
            device=device,
            parameters_bytes=_unique_bytes(params),
            gradients_bytes=_unique_bytes(p.grad for p in params if p.grad is not None),
            optimizer_state_bytes=_unique_bytes(t for opt in optimizers for state in opt.state.values()
                                                for t in _tensors(state)),
            activations_bytes=sum(self.saved.values()),
            buffers_bytes=_unique_bytes(module.buffers()) if module is not None else 0,
            live_between_steps_bytes=_live_tensor_bytes(device),
            allocator_peak_bytes=int(torch.cuda.max_memory_allocated()) if on_cuda else None)


def _unpack(tensor):
    return tensor


def _device_of(module: Optional[torch.nn.Module]) -> str:
    first = next(module.parameters(), None) if module is not None else None
    return "cuda" if first is not None and first.device.type == "cuda" else "cpu"


def _ptr(tensor: torch.Tensor) -> int:
    try:
        return tensor.untyped_storage().data_ptr()
    except Exception:
        return -1


def _parameters(module: Optional[torch.nn.Module], optimizers: list) -> list:
    params = list(module.parameters()) if module is not None else []
    params += [p for opt in optimizers for group in opt.param_groups for p in group["params"]]
    return params


def _tensors(value):
    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from _tensors(item)
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from _tensors(item)


def _unique_bytes(tensors) -> int:
    seen: dict[int, int] = {}
    for tensor in tensors:
        try:
            storage = tensor.untyped_storage()
            seen.setdefault(storage.data_ptr(), storage.nbytes())
        except Exception:
            continue
    return sum(size for ptr, size in seen.items() if ptr)


def _live_tensor_bytes(device: str) -> Optional[int]:
    """Bytes of every tensor on the device now: the allocator's count on CUDA; on the host the unique storages of
    the tensors Python can reach (once, between two warm-up steps: it walks every object)."""
    if device == "cuda":
        return int(torch.cuda.memory_allocated())
    import gc
    import warnings

    try:
        with warnings.catch_warnings():  # isinstance() on some modules' lazy attributes warns of deprecations
            warnings.simplefilter("ignore")
            return _unique_bytes(o for o in gc.get_objects() if isinstance(o, torch.Tensor) and o.device.type == "cpu")
    except Exception:
        return None
