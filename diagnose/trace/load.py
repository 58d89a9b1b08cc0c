"""Load a Kineto (torch.profiler) Chrome trace into the spans the analysis needs: the training steps, the
DataLoader waits, the main process's ops and runtime calls, and the device's kernels, copies and memsets.
Reading the file is trace_file's job, parsing it fastparse's (or trace_file's full parser), sorting the events
into kinds classify's; here the main thread is found and the spans are assembled into one Trace."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

import numpy as np

from diagnose.errors import UserError
from diagnose.trace.fastparse import begin_rows, fast_rows
from diagnose.trace.flop_ops import FlopOps, read_flop_ops
from diagnose.trace.kept_steps import MAX_EVENTS, KeptSteps
from diagnose.trace.memory_events import MemoryEvents, memory_events_between
from diagnose.trace.prefetch import Prefetch, text_is_big
from diagnose.trace.spans import Spans, present_in_order
from diagnose.trace.stream import may_hold, stream_rows
from diagnose.trace.trace_file import Parsed, kept_steps_of_objects, parsed_in_pieces, parsed_whole, read_bytes


@dataclass
class Trace:
    path: str
    metadata: dict
    steps: Spans
    dataloader: Spans
    cpu_ops: Spans  # main process only
    annotations: Spans
    kernels: Spans
    memcpy: Spans
    memset: Spans
    runtime: Spans
    python: Spans
    main_thread: object
    step_definition: str
    memory: MemoryEvents = field(default_factory=MemoryEvents)  # profile_memory's allocations and frees
    flop_ops: FlopOps = field(default_factory=FlopOps)  # matrix products, convolutions, attention, with shapes
    kept_steps: Optional[KeptSteps] = None  # the steps kept of a trace too big to hold whole; None: every event

    @property
    def has_gpu(self) -> bool:
        return len(self.kernels) + len(self.memcpy) + len(self.memset) > 0


def load_trace(path: Path, stream: Optional[bool] = None, max_events: int = MAX_EVENTS,
               kept_steps: Optional[KeptSteps] = None, ahead: Optional["ReadAhead"] = None) -> Trace:
    """The fast parser reads a trace laid out as Kineto writes it; any other layout, or any doubt, goes through
    the full JSON parser. A big trace (or any, with `stream`) is read as a stream, and one that may hold more
    than `max_events` events (0: no limit) too: past that only some of its steps are kept (kept_steps.py), or
    `kept_steps` where the ranks of a job chose theirs together. `ahead`: this trace's reading, begun earlier
    (begin_reading)."""
    if stream is None:
        stream = kept_steps is not None or read_as_stream(path, max_events)
    if stream:
        streamed = stream_rows(path, max_events=max_events, agreed=kept_steps)
        if streamed is not None:
            metadata, buckets, memory, flop_ops, kept_steps = streamed
            trace = _assemble(str(path), metadata, buckets, kept_steps)
            trace.memory, trace.flop_ops, trace.kept_steps = memory, flop_ops, kept_steps
            return trace
        # a layout the expressions do not read: parsed as objects a piece at a time, past the budget some
        # of its steps chosen by a first pass over its objects (the ranks' agreed one was chosen from that pass
        # too: trace_file.first_pass)
        kept_steps = kept_steps if kept_steps is not None else kept_steps_of_objects(path, max_events)
        parsed = parsed_in_pieces(path, window=kept_steps)
        if parsed is not None:
            return _parsed_trace(path, parsed, kept_steps)
    begun = ahead is not None and ahead.path == str(path)
    raw, reading = (ahead.raw, ahead.reading) if begun else (read_bytes(path), None)
    # memory events and FLOP ops read with the spans
    fast = reading.finish() if reading is not None else fast_rows(raw, per_chunk=_events_between)
    if fast is None:
        return _parsed_trace(path, parsed_whole(path, raw))
    trace = _assemble(str(path), fast.metadata, fast.spans)
    trace.memory = MemoryEvents.concat([chunk[0] for chunk in fast.per_chunk])
    trace.flop_ops = FlopOps.concat([chunk[1] for chunk in fast.per_chunk])
    return trace


def read_as_stream(path: Path, max_events: int = MAX_EVENTS) -> bool:
    """Whether load_trace reads the trace as a stream: a big one, or one that may pass the budget."""
    return text_is_big(path) or (max_events > 0 and may_hold(path, max_events))


@dataclass(frozen=True)
class ReadAhead:
    """A trace's reading begun before load_trace is called: its text, and the fast parser's reading of it under way
    (None: the text is not in Kineto's layout, the full parser reads it)."""
    path: str
    raw: bytes
    reading: Optional[object]


def begin_reading(path: Path, prefetched: Optional[Prefetch] = None) -> Optional[ReadAhead]:
    """Begin reading a trace that load_trace will read whole (with the default budget): a forked helper parses
    its chunks while this process imports the rest of diagnose. `prefetched`: its bytes, being read already. None
    where load_trace will stream it, or it cannot be read (load_trace reports that)."""
    if not path.is_file() or read_as_stream(path):
        return None
    raw = prefetched.bytes() if prefetched is not None else None
    if raw is None:
        try:
            raw = read_bytes(path)
        except UserError:
            return None
    return ReadAhead(str(path), raw, begin_rows(raw, per_chunk=_events_between))


def _parsed_trace(path: Path, parsed: Parsed, window: Optional[KeptSteps] = None) -> Trace:
    trace = _assemble(str(path), parsed.metadata, parsed.spans, window)
    trace.memory, trace.flop_ops, trace.kept_steps = parsed.memory, parsed.flop_ops, window
    return trace


def _events_between(raw: bytes, start: int, end: int) -> tuple[MemoryEvents, FlopOps]:
    return memory_events_between(raw, start, end), read_flop_ops(raw, start, end)


def _assemble(path: str, metadata: dict, b: dict[str, Spans], window: Optional[KeptSteps] = None) -> Trace:
    if not any(len(spans) for spans in b.values()):
        raise UserError(f"{path} holds no profiler events with a start and a duration to analyse",
                        "pass a trace written by torch.profiler (export_chrome_trace or tensorboard_trace_handler)")
    steps = b["step"]
    if len(steps):
        main = _most_spans_thread(steps)
        definition = "ProfilerStep markers"
    else:
        cut_in_time = window is not None and window.by_time  # its markers dropped: their thread stays the main one
        main = (window.main_thread if cut_in_time else ()) or _busiest_thread(Spans.concat([b["cpu"], b["dataloader"]]))
        definition = (window.step_definition() if cut_in_time
                      else "no ProfilerStep markers: the whole trace is one step")
    main_pid = main[0] if main else None

    def on_main_pid(spans: Spans) -> Spans:
        return spans if main_pid is None else spans.where_thread(lambda t: t[0] == main_pid)

    step_spans = steps.where_thread(lambda t: t == main).sorted() if len(steps) else _whole_trace_step(b, window)
    loader = b["dataloader"].where_thread(lambda t: t == main) if len(steps) else b["dataloader"]
    return Trace(
        path=path, metadata=metadata,
        steps=step_spans,
        dataloader=loader.sorted(),
        cpu_ops=on_main_pid(b["cpu"]),
        annotations=on_main_pid(b["annotation"]),
        kernels=b["kernel"], memcpy=b["memcpy"], memset=b["memset"],
        runtime=on_main_pid(b["runtime"]), python=on_main_pid(b["python"]),
        main_thread=main, step_definition=definition,
    )


def _most_spans_thread(spans: Spans):
    """The thread with the most spans (the first of them to appear, on a tie)."""
    codes, table = spans.thread_codes()
    order = present_in_order(codes)
    counts = np.bincount(codes, minlength=len(table))[order]
    return table[int(order[int(np.argmax(counts))])]


def _busiest_thread(spans: Spans) -> Optional[tuple]:
    """The thread whose spans last longest in all (the first of them to appear, on a tie)."""
    if not len(spans):
        return None
    codes, table = spans.thread_codes()
    totals: dict = {}
    for code, duration in zip(codes.tolist(), (spans.end - spans.start).tolist()):
        totals[code] = totals.get(code, 0.0) + duration
    return table[max(totals, key=totals.get)]


def _whole_trace_step(b: dict[str, Spans], window: Optional[KeptSteps] = None) -> Spans:
    if window is not None and window.by_time:
        return Spans.from_lists(np.array([window.keep_from]), np.array([window.keep_until]), ["time window"], [None],
                                np.array([-1], dtype=np.int64))
    every = [b[kind] for kind in ("cpu", "dataloader", "kernel", "memcpy", "memset", "runtime") if len(b[kind])]
    if not every:
        return Spans()
    start = min(float(s.start.min()) for s in every)
    end = max(float(s.end.max()) for s in every)
    return Spans.from_lists(np.array([start]), np.array([end]), ["whole trace"], [None],
                            np.array([-1], dtype=np.int64))
