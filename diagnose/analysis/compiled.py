"""torch.compile'd code in the profiled steps, and what dynamo did in the run: metrics for the compile rules.

In a trace, each entry into a compiled frame is a "Torch-Compiled Region: F/C" span (dynamo frame F, its C-th
compilation); inside it inductor's code runs as a "## Call CompiledFxGraph" annotation (within AOT autograd's
"CompiledFunction" op when there is a backward). A graph break ends frame F's graph: the frame's own bytecode then
runs the break eagerly and calls the resume function, a frame of its own whose region nests inside F's. So the time
in F's region outside its graphs and outside the regions nested in it is charged to the break that ended F.
"""
from __future__ import annotations

import re
from dataclasses import replace
from typing import Optional

import numpy as np

from diagnose.model import (
    BreakSite,
    Capture,
    Compilation,
    CompiledFrame,
    CompiledSteps,
    RecompileSite,
    stated_step_s,
)
from diagnose.trace import Trace
from diagnose.trace import intervals as iv

REGION = "Torch-Compiled Region: "
BACKWARD = "CompiledFunctionBackward"
GRAPH_ANNOTATION = "## Call CompiledFxGraph"
VALUE_READ_BACK = "a value read back at a graph break"  # what a guard on the resumed frame's stack checks


def compiled_steps(trace: Trace, steps: int, total_us: float) -> Optional[CompiledSteps]:
    """From `trace` cut to the profiled steps (their count, their summed time). The graphs' own code is inductor's
    ("## Call CompiledFxGraph"); the rest of the compiled frames and of the compiled backward is machinery that
    every graph pays (guards, AOT autograd's wrappers, the autograd node) and the eager code between graphs."""
    ops = trace.cpu_ops
    is_region = ops.mask(lambda name: name.startswith(REGION))
    if not is_region.any() or steps <= 0 or total_us <= 0:
        return None
    regions = np.flatnonzero(is_region)
    frame_ids = [_frame_id(ops.name(i)) for i in regions]
    graphs = iv.union(trace.annotations.intervals(trace.annotations.mask(lambda n: n.startswith(GRAPH_ANNOTATION))))
    starts, ends = ops.start[regions], ops.end[regions]
    eager_us: dict[int, float] = {}
    entries: dict[int, int] = {}
    for k, frame in enumerate(frame_ids):
        window = np.array([[starts[k], ends[k]]])
        nested = (starts >= starts[k]) & (ends <= ends[k])
        nested[k] = False
        inner = iv.union(np.vstack([graphs, np.column_stack([starts[nested], ends[nested]])]))
        covered = float(iv.measure_within(inner, window)[0])
        eager_us[frame] = eager_us.get(frame, 0.0) + max(ends[k] - starts[k] - covered, 0.0)
        entries[frame] = entries.get(frame, 0) + 1
    frames = tuple(CompiledFrame(frame_id=f, entries_per_step=entries[f] / steps,
                                 eager_s_per_step=eager_us[f] / steps / 1e6) for f in sorted(entries))
    compiled = iv.union(np.vstack([np.column_stack([starts, ends]), ops.intervals(ops.mask(lambda n: n == BACKWARD))]))
    outside_graphs_us = iv.total(iv.subtract(compiled, iv.intersect(graphs, compiled)))
    return CompiledSteps(graphs_per_step=len(regions) / steps, eager_frac=outside_graphs_us / total_us, frames=frames)


def without_compiling_steps(trace: Trace, host_steps: np.ndarray, capture: Optional[Capture]) -> np.ndarray:
    """The profiled steps less those that compiled (a new input size met late): the trace's ProfilerStep#N is the
    run's step N. All of them are kept when every one compiled (nothing steady to show)."""
    compiling = capture.compilation.compiling_steps() if capture is not None and capture.compilation else set()
    if not compiling or len(host_steps) > len(trace.steps):
        return host_steps
    numbers = [_step_number(name) for name in trace.steps.names[:len(host_steps)]]
    keep = np.array([n not in compiling for n in numbers], dtype=bool)
    return host_steps[keep] if keep.any() else host_steps


def _step_number(name: str) -> Optional[int]:
    number = name.rpartition("#")[2]
    return int(number) if number.isdigit() else None


def _frame_id(name: str) -> int:
    frame = name[len(REGION):].split("/", 1)[0].strip()
    return int(frame) if frame.isdigit() else -1


def with_dynamo(compiled: Optional[CompiledSteps], compilation: Optional[Compilation]) -> Optional[CompiledSteps]:
    """The trace's compiled steps joined with dynamo's records of the run: each break's frames charged to it."""
    if compilation is None:
        return compiled
    base = compiled or CompiledSteps(graphs_per_step=0.0, eager_frac=0.0)
    frames = {f.frame_id: f for f in base.frames}
    recompiles = recompile_sites(compilation)
    breaks = []
    for b in compilation.graph_breaks:
        seen = [frames[f] for f in b.frame_ids if f in frames]
        resumed = [r for r in recompiles if r.variable == VALUE_READ_BACK
                   and r.location and b.location and r.location.rsplit(":", 1)[0] == b.location.rsplit(":", 1)[0]]
        breaks.append(BreakSite(
            location=b.location, function=b.function, reason=b.reason, code=b.code, hint=b.hint,
            per_step=max((f.entries_per_step for f in seen), default=None) if compiled is not None else None,
            eager_s_per_step=sum(f.eager_s_per_step for f in seen) if seen else None,
            recompiles=sum(r.count for r in resumed)))
    breaks.sort(key=lambda b: -(b.eager_s_per_step or 0.0))
    eager = sum(b.eager_s_per_step or 0.0 for b in breaks)
    total = break_share(base)
    if compiled is not None and eager > 0:
        breaks = [replace(b, cost_frac=total * (b.eager_s_per_step or 0.0) / eager) for b in breaks]
    return replace(base, breaks=tuple(breaks), recompiles=recompiles)


def break_share(compiled: CompiledSteps) -> float:
    """The share of the step the graph breaks cost: of the time compiled code spends outside its graphs (guards,
    wrappers, the autograd node, eager code between graphs), what is paid for the graphs past the first, each
    graph paying alike. A lower bound: the fusion lost across a break, and a GPU's sync at .item(), are not in it."""
    graphs = compiled.graphs_per_step
    return compiled.eager_frac * (graphs - 1) / graphs if graphs > 1 else 0.0


_SHAPE_GUARD = re.compile(r"tensor '([^']+)' size mismatch at index (\d+)")
_COMPILE_ID = re.compile(r"^\s*\d+/\d+:\s*")


def recompile_sites(compilation: Compilation) -> tuple[RecompileSite, ...]:
    """Recompilations grouped by the function compiled again, with the guard that failed first."""
    groups: dict[tuple, list] = {}
    for event in compilation.events:
        if event.recompile_reason or event.failed:
            groups.setdefault((event.frame, event.location), []).append(event)
    limited = set(compilation.eager_after_limit)
    sites = []
    for (frame, location), events in groups.items():
        recompiled = [e for e in events if e.is_recompile]
        guard = _guard(recompiled[0].recompile_reason if recompiled else "")
        shape = _SHAPE_GUARD.search(guard)
        sites.append(RecompileSite(
            frame=frame, location=location, count=len(recompiled), seconds=sum(e.seconds for e in recompiled),
            guard=guard, variable=shape.group(1) if shape else _value_guard(guard),
            dimension=int(shape.group(2)) if shape else None,
            eager_after_limit=(f"{frame} at {location}" if location else frame) in limited,
            steps=tuple(e.step for e in recompiled)))
    return tuple(sorted(sites, key=lambda r: -r.count))


def _guard(reason: str) -> str:
    """The failed guard as dynamo states it, on one line, without its compile id and the source it quotes."""
    first = reason.strip().splitlines()[0] if reason.strip() else ""
    return _COMPILE_ID.sub("", first).split("  #", 1)[0].strip()


def _value_guard(guard: str) -> Optional[str]:
    """A guard on a value the resumed frame got from the stack: what a graph break read back (.item())."""
    return VALUE_READ_BACK if guard.startswith("___stack") else None


def compile_metrics(compiled: Optional[CompiledSteps], capture: Optional[Capture],
                    step_time_s: dict) -> dict[str, Optional[float]]:
    """The compile rules' metrics: from the trace (graphs and eager time per step) and, in a run, from dynamo's
    records (breaks, recompiles, compile time). Unknown (None) where neither says; 0 where the run compiled nothing."""
    compilation = capture.compilation if capture is not None else None
    if compiled is None:
        return {"compiled": 0.0 if capture is not None else None}
    metrics: dict[str, Optional[float]] = {"compiled": 1.0}
    if compiled.graphs_per_step:
        metrics.update(compile_graphs_per_step=compiled.graphs_per_step, compile_eager_frac=compiled.eager_frac)
    if compilation is None:
        return metrics
    if compiled.breaks and compiled.graphs_per_step > 1:
        metrics["compile_break_frac"] = break_share(compiled)
    recompiles = compilation.recompiles
    total_s = compilation.seconds
    recompile_s = sum(e.seconds for e in recompiles)
    metrics.update(
        compile_dynamic=None if compilation.dynamic is None else float(bool(compilation.dynamic)),
        compile_graph_breaks=float(len(compiled.breaks)),
        compile_recompiles=float(len(recompiles)),
        compile_recompiles_after_warmup=float(sum(e.step >= capture.warmup_steps for e in recompiles)),
        compile_recompile_limit_hit=float(bool(compilation.eager_after_limit)),
        compile_s=total_s,
        compile_recompile_s=recompile_s,
        **_run_shares(capture, step_time_s, total_s, recompile_s),
    )
    return metrics


def _run_shares(capture: Capture, step_time_s: dict, compile_s: float, recompile_s: float) -> dict:
    """Compile and recompile time as shares of the whole run the script is written for (its steps at the stated
    step time, plus the compile time): unknown where the run's length is not."""
    length = capture.run_length
    step_s = stated_step_s(step_time_s)
    if length is None or not length.total_steps or not step_s:
        return {"compile_run_frac": None, "compile_recompile_run_frac": None}
    run_s = length.total_steps * step_s + compile_s
    return {"compile_run_frac": compile_s / run_s, "compile_recompile_run_frac": recompile_s / run_s}
