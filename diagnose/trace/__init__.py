"""Reading torch.profiler traces: the one surface that analysis/ and compare/ use (tests/test_layers.py holds them
to it). A trace is read into a `Trace` of spans by `load_trace(path, max_events=...)`, past its budget a window of
its steps (kept_steps.py); compare's op table reads its columns with `read_op_columns(path, max_events)`. How the text
is read stays behind this surface: the fast parser and the stream (fastparse.py, stream.py, event_pieces.py),
numba's compiled passes (jitscan.py, _jitkernels.py), the reading started ahead by the CLI (prefetch.py), forked
parsing, and memory given back to the system (release.py).

Names are looked up when first used, so that importing the light modules here (prefetch.py, before the rest of
the CLI imports) does not import numpy and the readers with them."""
from __future__ import annotations

import importlib

# name -> the module of this package that defines it
SURFACE = {
    # a trace read into spans
    "Trace": "load", "load_trace": "load", "ReadAhead": "load",
    "Spans": "spans", "present_in_order": "spans", "codes_of": "spans", "threads_where": "spans",
    "in_start_order": "spans",
    "MemoryEvents": "memory_events", "CPU": "memory_events", "CUDA": "memory_events",
    "FlopOps": "flop_ops", "OpKind": "flop_ops", "ATTENTION": "flop_ops", "GEMM": "flop_ops",
    "outermost_in": "flop_ops",
    # facts about spans, computed once for every reader of them
    "self_times": "self_time_rule", "span_self_times": "self_time_rule", "nesting_parents": "self_time_rule",
    "frame_pieces": "frame_walk", "BUILT_IN": "frame_walk", "USER": "frame_walk", "LIBRARY": "frame_walk",
    "FRAMEWORK": "frame_walk",
    "from_launch": "launches", "from_launch_each": "launches",
    "is_communication": "classify", "SYNC_RUNTIME": "classify",
    # a trace past its budget: the steps kept, chosen for several ranks together
    "MAX_EVENTS": "prefetch", "text_is_big": "prefetch", "KeptSteps": "kept_steps", "agreed_kept_steps": "kept_steps",
    "first_pass": "trace_file",
    # compare's op table: the columns it needs, read as a stream
    "OpColumns": "op_columns", "read_op_columns": "op_columns", "whole_text_columns": "op_columns",
    "NO_CORRELATION": "op_columns", "PIECE_BYTES": "event_pieces",
    # resources the readers use, for the analysis's own work
    "released": "release", "usable_cores": "fastparse",
}
# modules of this package that are part of the surface as a whole: interval arithmetic over spans
SURFACE_MODULES = ("intervals",)
__all__ = [*SURFACE, *SURFACE_MODULES]


def __getattr__(name: str):
    module = SURFACE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value
