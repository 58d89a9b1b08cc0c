"""Put host-overhead time on the user's source lines: from the stack sampler's samples in run mode, from a
with_stack trace's Python frames when a trace is analysed on its own."""
from __future__ import annotations

import linecache
import os
from collections import Counter
from typing import Optional

import numpy as np

from diagnose.analysis.frames import FrameSegments
from diagnose.model import SourceLine, StackSamples
from diagnose.trace import Trace
from diagnose.trace import intervals as iv


def attribute_host_lines(trace: Trace, stacks: Optional[StackSamples], overhead: np.ndarray, n_steps: int,
                         mean_step_s: float, limit: int = 10) -> tuple[SourceLine, ...]:
    """Share the host-overhead time among the user lines the main thread was on while it happened."""
    if stacks is None or not stacks.t_ns or stacks.sync_mark_ns is None or n_steps == 0:
        return ()
    marks = [s for s, n in zip(trace.annotations.start, trace.annotations.names) if n == "diagnose::clock_sync"]
    if not marks:
        return ()
    offset_us = marks[-1] - stacks.sync_mark_ns / 1000.0
    t_us = np.asarray(stacks.t_ns, dtype=np.float64) / 1000.0 + offset_us
    inside = iv.contains(overhead, t_us)
    in_torch = stacks.in_torch or (False,) * len(stacks.t_ns)
    counts = Counter((loc, bool(lib)) for loc, lib, hit in zip(stacks.location, in_torch, inside) if hit and loc)
    hits = int(inside.sum())
    if not hits:
        return ()
    per_step_s = iv.total(overhead) / 1e6 / n_steps
    lines = []
    for (location, lib), count in counts.most_common(limit):
        seconds = per_step_s * count / hits
        frac = seconds / mean_step_s if mean_step_s else 0.0
        lines.append(SourceLine(location, seconds, frac, _source(location), lib))
    return tuple(lines)


def lines_from_frames(frames: FrameSegments, overhead: np.ndarray, n_steps: int, mean_step_s: float,
                      roots: tuple[str, ...] = (), limit: int = 10) -> tuple[SourceLine, ...]:
    """Host-overhead time under each of the user's functions, from a with_stack trace's Python frames."""
    if not len(frames) or n_steps == 0:
        return ()
    by_location = frames.time_by_location(overhead)
    lines = []
    for (location, lib), us in sorted(by_location.items(), key=lambda kv: -kv[1])[:limit]:
        seconds = us / 1e6 / n_steps
        frac = seconds / mean_step_s if mean_step_s else 0.0
        lines.append(SourceLine(location, seconds, frac, _source(location, roots), lib))
    return tuple(lines)


def _source(location: str, roots: tuple[str, ...] = ()) -> str:
    """The line's text, when its file can be found: as given, or (a trace's relative path) under one of roots."""
    path, _, line = location.rpartition(":")
    if not line.isdigit():
        return ""
    for candidate in (path, *(os.path.join(root, path) for root in roots if not os.path.isabs(path))):
        text = linecache.getline(candidate, int(line)).strip()
        if text:
            return text
    return ""
