"""What torch.compile did while the script ran, read from dynamo's own structured records, not its printed logs.

- each compilation: torch._dynamo.utils.get_compilation_metrics() (CompilationMetrics: the frame, its times split
  into dynamo, AOT autograd, inductor and code generation, cache hits, the guard that failed for a recompilation,
  why a frame was given up: the recompile limit);
- each graph break: torch._dynamo's GraphCompileReason (the reason and the user's stack where the graph ended),
  kept with the compile id under way when it was made, so the trace's "Torch-Compiled Region: F/C" spans of frame
  F can be charged to the break that ended F's graph;
- the recompile limit: torch._dynamo.config.recompile_limit.

Checked on torch 2.13. Every field is read with a default, so an older torch that records less gives less (None
times, no breaks) rather than an error; a torch without these records gives no Compilation at all.
"""
from __future__ import annotations

import re
import sys
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Optional

import torch

from diagnose.capture.compile_cache import cache_kind
from diagnose.capture.sites import _realpath, is_user_file
from diagnose.model import Compilation, CompileEvent, GraphBreak, compiling_steps

# Steps past the planned warm-up that a run may keep warming up while steps still compile: dynamo's recompile
# limit (8) twice over, so that a frame that recompiles to its limit has settled (or runs eagerly)
COMPILE_SETTLE_STEPS = 16
# Steps in a row without compiling that say compilation has settled: a new input size may come only now and then
QUIET_STEPS = 3
_GB_CODE = re.compile(r"/gb/(gb\d+)\.html", re.IGNORECASE)


@dataclass
class _Break:
    location: Optional[str]
    function: str
    reason: str
    code: str
    hint: str
    frame_ids: set = field(default_factory=set)
    compiles: int = 0


@dataclass
class CompileSettings:
    """The arguments of the user's torch.compile(...) / module.compile(...) call."""
    location: Optional[str] = None
    dynamic: Optional[bool] = None
    mode: Optional[str] = None
    backend: str = "inductor"


class DynamoWatch:
    """Collects compilations as steps go by; `compilation()` turns them into the frozen record."""

    def __init__(self) -> None:
        self.step = 0
        self.settings: Optional[CompileSettings] = None
        self._events: list[CompileEvent] = []
        self._pending_backward: dict[str, float] = {}  # compile id -> backward seconds, read before its forward
        # the CompilationMetrics objects already read, by id; kept alive so that no later record reuses an id
        self._seen: dict[int, Any] = {}
        self._breaks: dict[tuple, _Break] = {}
        self._frames: dict[str, tuple[str, Optional[str]]] = {}  # dynamo frame id -> (function, file:first line)
        self._undo: list[Callable[[], None]] = []
        self._hooked = False

    # -- install ----------------------------------------------------------------------------------
    def install(self) -> Callable[[], None]:
        """Start watching; returns the function that stops it. Dynamo itself is hooked at the script's first
        torch.compile call: importing it creates inductor's cache folder, which only the script may make."""
        return self.uninstall

    def _hook_dynamo(self) -> None:
        if self._hooked:
            return
        self._hooked = True
        try:
            from torch._dynamo.output_graph import GraphCompileReason
        except ImportError:  # a torch without dynamo
            return
        original = GraphCompileReason.__post_init__
        watch = self

        def post_init(reason_record) -> None:
            original(reason_record)
            if reason_record.graph_break:
                watch._on_break(reason_record)

        GraphCompileReason.__post_init__ = post_init
        self._seen.update((id(m), m) for m in _compilation_metrics())  # compiled before the watch: not this run's
        self._undo.append(lambda: setattr(GraphCompileReason, "__post_init__", original))

    def uninstall(self) -> None:
        for undo in reversed(self._undo):
            undo()
        self._undo.clear()

    def on_compile_call(self, kwargs: dict[str, Any], location: Optional[str]) -> None:
        """The script called torch.compile or module.compile: the first call's settings are the run's."""
        self._hook_dynamo()
        if self.settings is not None:
            return
        backend = kwargs.get("backend", "inductor")
        self.settings = CompileSettings(location=location, dynamic=kwargs.get("dynamic"), mode=kwargs.get("mode"),
                                        backend=backend if isinstance(backend, str) else getattr(
                                            backend, "__name__", type(backend).__name__))

    # -- as the script runs -------------------------------------------------------------------------
    def on_step(self, step: int) -> None:
        """A step boundary: compilations read so far belong to the step that just ended."""
        self.collect()
        self.step = step

    def seconds(self) -> float:
        """Compile time read so far (to the last step boundary)."""
        return sum(e.seconds for e in self._events)

    def settling(self, step: int, planned_warmup: int) -> bool:
        """Whether warm-up should go on at `step`: one of the last QUIET_STEPS steps compiled, and `step` is within
        COMPILE_SETTLE_STEPS of the planned warm-up."""
        if not self._events or step >= planned_warmup + COMPILE_SETTLE_STEPS:
            return False
        compiling = self.compiling_steps()
        return any(s in compiling for s in range(step - QUIET_STEPS, step))

    def compiled_last_step(self) -> bool:
        """Whether the step that ended at the last boundary compiled."""
        return self.step - 1 in self.compiling_steps()

    def compiling_steps(self) -> set[int]:
        """The steps so far (to the last boundary) in which something compiled."""
        return compiling_steps(self._events)

    def events_between(self, first: int, end: int) -> list[CompileEvent]:
        """The compilations read so far made in steps first .. end - 1."""
        return [e for e in self._events if first <= e.step < end]

    def seconds_by_step(self) -> dict[int, float]:
        """Compile time read so far, by the step it happened in."""
        by_step: dict[int, float] = {}
        for event in self._events:
            by_step[event.step] = by_step.get(event.step, 0.0) + event.seconds
        return by_step

    def collect(self) -> None:
        for metrics in _compilation_metrics():
            if id(metrics) in self._seen:
                continue
            self._seen[id(metrics)] = metrics
            self._read(metrics)

    def _read(self, m) -> None:
        compile_id = str(_get(m, "compile_id") or "")
        backward_us = _get(m, "backward_cumulative_compile_time_us")
        if _get(m, "co_name") is None and backward_us is not None:  # the backward graph of a compiled forward
            event = next((e for e in reversed(self._events) if e.compile_id == compile_id), None)
            if event is None:
                self._pending_backward[compile_id] = backward_us / 1e6
            else:
                self._events[self._events.index(event)] = _with_backward(event, backward_us / 1e6)
            return
        total = _get(m, "entire_frame_compile_time_s") or 0.0
        backward_s = self._pending_backward.pop(compile_id, None)
        filename, first_line = _get(m, "co_filename"), _get(m, "co_firstlineno")
        frame_id = compile_id.split("/", 1)[0]
        if _get(m, "co_name") is not None:
            self._frames[frame_id] = (str(_get(m, "co_name")),
                                      f"{_realpath(filename)}:{first_line}" if filename and first_line else None)
        # a frame given up at the recompile limit is recorded without its code: it is the frame of its id
        frame, location = self._frames.get(frame_id, ("?", None))
        self._events.append(CompileEvent(
            compile_id=compile_id,
            frame=frame,
            location=location,
            step=self.step,
            seconds=float(total) + (backward_s or 0.0),
            # each cumulative time holds the next stage's: dynamo's tracing holds AOT autograd, which holds inductor
            dynamo_s=_less(_get(m, "dynamo_cumulative_compile_time_us"),
                           _get(m, "aot_autograd_cumulative_compile_time_us")),
            aot_autograd_s=_less(_get(m, "aot_autograd_cumulative_compile_time_us"),
                                 _get(m, "inductor_cumulative_compile_time_us")),
            inductor_s=_us(_get(m, "inductor_cumulative_compile_time_us")),
            codegen_s=_us(_get(m, "inductor_code_gen_cumulative_compile_time_us")),
            autotune_s=_us(_get(m, "compile_time_autotune_time_us")),
            backward_s=backward_s,
            cache_hits=sum(_get(m, k) or 0 for k in (
                "inductor_fx_local_cache_hit_count", "inductor_fx_remote_cache_hit_count",
                "aotautograd_local_cache_hit_count", "aotautograd_remote_cache_hit_count")),
            cache_misses=sum(_get(m, k) or 0 for k in (
                "inductor_fx_local_cache_miss_count", "inductor_fx_remote_cache_miss_count",
                "aotautograd_local_cache_miss_count", "aotautograd_remote_cache_miss_count")),
            recompile_reason=str(_get(m, "recompile_reason") or ""),
            failed=_first_line(_get(m, "fail_reason")) if _get(m, "fail_type") else "",
        ))

    def _on_break(self, record) -> None:
        stack = list(getattr(record, "user_stack", None) or [])
        site = next((f for f in reversed(stack) if f.filename and is_user_file(f.filename)), None)
        reason = str(getattr(record, "reason", "") or "")
        location = f"{_realpath(site.filename)}:{site.lineno}" if site is not None else None
        title = _first_line(reason)
        key = (location, title)
        found = self._breaks.get(key)
        if found is None:
            code = _GB_CODE.search(reason)
            found = self._breaks[key] = _Break(location=location, function=site.name if site else "?", reason=title,
                                               code=code.group(1).upper() if code else "", hint=_hint(reason))
        found.compiles += 1
        frame_id = _current_frame_id()
        if frame_id is not None:
            found.frame_ids.add(frame_id)

    # -- the record -----------------------------------------------------------------------------------
    def compilation(self) -> Optional[Compilation]:
        self.collect()
        if self.settings is None and not self._events:
            return None
        settings = self.settings or CompileSettings()
        events = self._events
        return Compilation(
            torch_version=torch.__version__,
            call_location=settings.location,
            dynamic=settings.dynamic,
            mode=settings.mode,
            backend=settings.backend,
            events=tuple(events),
            graph_breaks=tuple(GraphBreak(location=b.location, function=b.function, reason=b.reason, code=b.code,
                                          hint=b.hint, frame_ids=tuple(sorted(b.frame_ids)), compiles=b.compiles)
                               for b in self._breaks.values()),
            recompile_limit=_recompile_limit(),
            cache=cache_kind(),
            eager_after_limit=tuple(dict.fromkeys(f"{e.frame} at {e.location}" if e.location else e.frame
                                                  for e in events if "recompile limit" in e.failed.lower())),
        )


def compile_seconds(compilation: Optional[Compilation]) -> Optional[float]:
    """All the time dynamo spent compiling in a process (None: nothing was compiled)."""
    if compilation is None or not compilation.events:
        return None
    return compilation.seconds


def _with_backward(event: CompileEvent, backward_s: float) -> CompileEvent:
    return replace(event, backward_s=(event.backward_s or 0.0) + backward_s, seconds=event.seconds + backward_s)


def _compilation_metrics() -> list:
    if "torch._dynamo" not in sys.modules:  # nothing compiled yet (and importing it would make inductor's folder)
        return []
    try:
        from torch._dynamo.utils import get_compilation_metrics
    except ImportError:  # a torch without these records
        return []
    return list(get_compilation_metrics())


def _current_frame_id() -> Optional[int]:
    try:
        compile_id = torch._guards.CompileContext.current_compile_id()
    except Exception:  # no compile context outside a compilation, or an older torch
        return None
    frame_id = getattr(compile_id, "frame_id", None)
    return int(frame_id) if frame_id is not None else None


def _recompile_limit() -> Optional[int]:
    config = torch._dynamo.config
    limit = getattr(config, "recompile_limit", None)
    if limit is None:
        limit = getattr(config, "cache_size_limit", None)  # its name before torch 2.6
    return int(limit) if isinstance(limit, int) else None


def _get(metrics, name: str):
    return getattr(metrics, name, None)


def _us(value) -> Optional[float]:
    return value / 1e6 if isinstance(value, (int, float)) else None


def _less(total_us, part_us) -> Optional[float]:
    if not isinstance(total_us, (int, float)):
        return None
    return max(total_us - (part_us if isinstance(part_us, (int, float)) else 0), 0) / 1e6


def _first_line(text) -> str:
    return str(text or "").strip().splitlines()[0].strip() if str(text or "").strip() else ""


def _hint(reason: str) -> str:
    """torch's first hint for the break ("Hint: Set `torch._dynamo.config.capture_scalar_outputs = True` ...")."""
    for line in reason.splitlines():
        stripped = line.strip()
        if stripped.startswith("Hint:"):
            return stripped[len("Hint:"):].strip()
    return ""
