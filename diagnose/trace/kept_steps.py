"""A window of steps for a trace too big to hold whole. Every span of a trace is held for the analysis (about 40
bytes an event), so memory grows with the trace; past `max_events` complete events only a run of consecutive
steps from the middle of the trace is kept, as if the profiler had recorded those steps alone: memory is then
bounded by the budget, whatever the trace's size. A first pass over the text finds the steps (the ProfilerStep
markers) and counts the events; the stream then drops every event outside the window as it parses. A trace with
too few markers to cut it at steps is cut in time instead: the middle span that holds about the budget's events,
analysed as one step; so is a trace whose steps are too big for the budget to hold one with its lead-in and
lead-out steps (memory then stays bounded by the budget, however big a step)."""
from __future__ import annotations

import re
from array import array
from collections import Counter
from dataclasses import dataclass
from itertools import islice
from typing import Iterable, Optional, Sequence

import numpy as np
import orjson

from diagnose.trace.classify import complete_events, correlation_id, thread_of_text
from diagnose.trace.fastparse import FAST_EVENT
from diagnose.trace.flop_ops import FlopOps
from diagnose.trace.memory_events import MemoryEvents
from diagnose.trace.patterns import ID, NUMBER, SEP, STRING, compiled
from diagnose.trace.prefetch import MAX_EVENTS
from diagnose.trace.spans import Spans

__all__ = ["MAX_EVENTS", "KeptSteps", "StepCounter", "ObjectCounter", "choose_kept_steps", "agreed_kept_steps",
           "spans_in", "memory_in", "flops_in"]
DEVICE_KINDS = ("kernel", "memcpy", "memset")  # run when the device gets to them: linked to launches by correlation
STEP_NAME = b'"ProfilerStep#'
# read where the marker's name is found (every event has a "name" key: no use searching for that)
STEP_MARK = compiled(rb'"ProfilerStep#(\d*)[^"\\]*"' + SEP + rb'"pid":\s*' + ID + SEP + rb'"tid":\s*' + ID
                       + SEP + rb'"ts":\s*' + NUMBER + SEP + rb'"dur":\s*' + NUMBER)
# a runtime call (cuda_runtime, hip_runtime) with its correlation id, the first of its args' ids
LAUNCH_MARK = compiled(rb'_(?:runtime|driver)"' + SEP + rb'"name":\s*"[^"\\]*"' + SEP + rb'"pid":\s*' + ID
                         + SEP + rb'"tid":\s*' + ID + SEP + rb'"ts":\s*' + NUMBER + SEP + rb'"dur":\s*' + NUMBER
                         + SEP + rb'"args":\s*\{[^{}]*?"correlation":\s*(\d+)')
# a complete event's start: where the trace's events lie in time, for a trace with no steps to cut it at
START_MARK = compiled(rb'"ph":\s*"X",[^{}]*?"ts":\s*' + NUMBER)
START_LABELS = (b'"ph": "X"', b'"ph":"X"')
MIN_STEPS = 3  # fewer steps than a window and its lead-in and lead-out: the trace is cut in time
# a kernel with its correlation id: where the device ran work launched at a known time
KERNEL_MARK = compiled(rb'"kernel"' + SEP + rb'"name":\s*' + STRING + SEP + rb'"pid":\s*' + ID
                         + SEP + rb'"tid":\s*' + ID + SEP + rb'"ts":\s*' + NUMBER + SEP + rb'"dur":\s*' + NUMBER
                         + SEP + rb'"args":\s*\{[^{}]*?"correlation":\s*(\d+)')


@dataclass(frozen=True)
class KeptSteps:
    """The steps kept of a trace too big for its event budget (`--max-events`): a run of whole steps from its
    middle with the step before and after them, or, where steps cannot be cut, a span of time."""
    first: int  # index of the window's first step among the trace's steps (0-based)
    last: int  # index of its last step
    steps: int  # steps in the trace
    events: int  # complete events in the trace (estimated)
    max_events: int
    keep_from: float  # host start of the step before the window (its lead-in), or of the first step, us
    keep_until: float  # host end of the step after the window (its lead-out), or of the last step, us
    # host events are kept until here: past keep_until while the device still runs the window's work (a device
    # that lags the host accounts the last steps later, when the host has gone on to steps after the window)
    host_until: float
    lead_in: bool  # the step before the window is kept too, for where the device stood when the window began
    lead_out: bool  # and the step after it, for what ran beside the last step's device work after its host end
    main_thread: tuple  # (pid, tid) whose markers are the steps, as the analysis picks it: the one with most
    # correlation ids of the launches the window's steps may have made (bounds from a sample, a little wider):
    # their device work is kept wherever it ran, as late as the device lags the host
    corr_low: int
    corr_high: int
    by_launch: bool  # the bounds were sampled (else device work is kept where it overlaps in time)
    # too few steps to cut at (fewer than MIN_STEPS markers), or steps past the budget each: keep_from-keep_until
    # is a span of time, kept as one step, and the trace's own markers are dropped (main_thread: the markers'
    # thread, () where there are none); trace_us is the trace's span of time, as sampled
    by_time: bool = False
    trace_us: float = 0.0
    # why it was cut in time: "markers" (too few), "steps" (too big), "ranks" (the job's ranks share one span, as
    # another rank's steps are too big)
    cause: str = ""

    def own_steps(self, host_windows: np.ndarray, timeline):
        """The window's own steps: (host windows, StepTimeline) without the lead-in and lead-out steps."""
        first, stop = int(self.lead_in), len(host_windows) - int(self.lead_out)
        if stop <= first:  # not as many steps as were chosen (markers the first pass read apart): keep them all
            return host_windows, timeline
        return host_windows[first:stop], timeline.steps(first, stop)

    def note(self) -> str:
        span = (f"{_duration(self.keep_until - self.keep_from)} from the middle of the trace's "
                f"{_duration(self.trace_us)} was analysed as one step")
        if self.by_time and self.cause == "ranks":
            return (f"{span}, the span of time every rank of the job was cut to: another rank's steps are too big "
                    f"for --max-events ({self.max_events:,} events; 0 reads every event) to hold one with the two "
                    "beside it")
        if self.by_time:
            return (f"{span}: the trace holds about {self.events:,} events, over the {self.max_events:,} read at most "
                    f"(--max-events; 0 reads every event, about 40 bytes each), and {self.why_in_time()}")
        return (f"steps {self.first + 1}-{self.last + 1} of {self.steps} were analysed (the middle ones): the trace "
                f"holds about {self.events:,} events, over the {self.max_events:,} read at most (--max-events; 0 "
                "reads every event, about 40 bytes each)")

    def markers(self) -> str:
        """Why a trace was cut in time, briefly: how few ProfilerStep markers it has, or how big its steps are."""
        if self.cause == "steps":
            return f"{self.steps} steps of about {self.events // self.steps:,} events each"
        return ("no ProfilerStep markers" if not self.steps else
                f"only {self.steps} ProfilerStep marker{'s' if self.steps > 1 else ''}")

    def step_definition(self) -> str:
        """What the one step of a trace cut in time is, as the analysis names how it found its steps."""
        if self.cause == "ranks":
            return "a span of time the job's ranks share is one step"
        return f"{self.markers()}: a span of the trace's time is one step"

    def why_in_time(self) -> str:
        if self.cause == "steps":
            return f"its {self.markers()}: a step and the two beside it are more than that"
        return f"{self.markers()} to cut it at steps"


def kineto_layout(text: bytes, events: int = 16) -> Optional[bool]:
    """Whether the first complete events in `text` are laid out as Kineto writes them (its keys in its order: the
    profiler's own span aside); None when it holds none of them."""
    for match in islice(FAST_EVENT.finditer(text), events):
        if match.group(1):
            return True
        if match.group(7) != b"Trace":
            return False
    return None


def _duration(us: float) -> str:
    return f"{us / 1e6:.3g} s" if us >= 1e6 else f"{us / 1e3:.3g} ms"


class StepCounter:
    """The first pass: fed the inflated text block by block (`feed`, then `finish`), it keeps the ProfilerStep
    markers (a few numbers each), a sample of events' starts, runtime calls and kernels (each block's first and
    last of each) and estimates the complete events from every SAMPLE_EVERY-th block's count (a count costs about
    as much as the search for the markers). An event cut by a block's end is read with the next block's head."""

    SAMPLE_EVERY = 8
    OVERLAP = 64 << 10  # far longer than the events read here

    def __init__(self) -> None:
        self.blocks = self.bytes = self.sampled_bytes = self.sampled_events = 0
        self.marks: list[tuple[bytes, bytes, float, float, bytes]] = []  # (pid, tid, ts, dur, step number)
        self.launch_pid: list[bytes] = []  # the sampled runtime calls: process, start (us), correlation id
        self.launch_ts, self.launch_corr = array("d"), array("q")
        self.kernel_ts, self.kernel_corr = array("d"), array("q")  # the sampled kernels: start, correlation id
        self.starts = array("d")  # the sampled complete events' starts: where the events lie in time
        # whether the first complete events are laid out as Kineto writes them (None: none seen yet); where not,
        # this pass reads none of what it keeps (object_counted in trace_file.py counts such a trace)
        self.kineto_layout: Optional[bool] = None
        self._tail = b""  # the last block's end, whose events may run into the next block

    def feed(self, block: bytes) -> None:
        if self.kineto_layout is None:
            self.kineto_layout = kineto_layout(block)
        if self.blocks % self.SAMPLE_EVERY == 0:
            self.sampled_events += block.count(b'"ph": "X"') + block.count(b'"ph":"X"')
            self.sampled_bytes += len(block)
        self.blocks += 1
        self.bytes += len(block)
        if len(block) < 2 * self.OVERLAP:  # a short block (a gzip member's end): read with what follows
            self._tail += block
            return
        # the events that start in the last block's tail, read with this block's head (copies of a few KB: a
        # copy of the whole block would cost more than reading it)
        self._read(self._tail + block[:self.OVERLAP], len(self._tail))
        self._read(block, len(block) - self.OVERLAP)
        self._tail = block[len(block) - self.OVERLAP:]

    def finish(self) -> None:
        self._read(self._tail, len(self._tail))
        self._tail = b""

    def _read(self, text: bytes, limit: int) -> None:
        """The events that start before `limit` (each ends inside `text`: an event is far shorter than OVERLAP)."""
        # a literal search (faster than the expression's own); a literal that starts before the limit may end past
        # it (the text runs on past the limit, but for the last block's)
        end = limit + len(STEP_NAME) - 1
        at = text.find(STEP_NAME, 0, end)
        while at >= 0:
            mark = STEP_MARK.match(text, at)
            if mark is not None:
                number, pid, tid, ts, dur = mark.groups()
                self.marks.append((pid, tid, float(ts), float(dur), number))
            at = text.find(STEP_NAME, at + 1, end)
        # (an id past int64's largest links nothing, as the expressions read it: not a sample)
        for match in _first_and_last(text, limit, LAUNCH_MARK, LAUNCH_LABELS):
            if int(match.group(5)) < 1 << 63:
                self.launch_pid.append(match.group(1))
                self.launch_ts.append(float(match.group(3)))
                self.launch_corr.append(int(match.group(5)))
        for match in _first_and_last(text, limit, KERNEL_MARK, (b'"kernel",',)):
            if int(match.group(6)) < 1 << 63:
                self.kernel_ts.append(float(match.group(4)))
                self.kernel_corr.append(int(match.group(6)))
        for match in _first_and_last(text, limit, START_MARK, START_LABELS):
            self.starts.append(float(match.group(1)))

    @property
    def events(self) -> int:
        return round(self.sampled_events * self.bytes / self.sampled_bytes) if self.sampled_bytes else 0

    def kept_steps(self, max_events: int, at: Optional[tuple[int, int]] = None,
               span: Optional[tuple[float, float]] = None) -> Optional[KeptSteps]:
        return choose_kept_steps(self.marks, self.events, max_events,
                             zip(self.launch_pid, self.launch_ts, self.launch_corr),
                             zip(self.kernel_ts, self.kernel_corr), at, self.starts, span)

    def reaches(self, span: tuple[float, float]) -> bool:
        """Whether the sampled events reach into `span` (a span shared by ranks whose traces cover another time
        leaves this one its own)."""
        return bool(self.starts) and min(self.starts) < span[1] and max(self.starts) > span[0]

    @property
    def stepped(self) -> bool:
        """Whether the trace has steps enough to be cut at them."""
        return bool(self.marks) and len(main_steps(self.marks)[1]) >= MIN_STEPS

    def cut_at_steps(self, max_events: int) -> bool:
        """Whether the trace is cut at steps for `max_events` (else in time: too few steps, or too big)."""
        return self.stepped and not steps_too_big(len(main_steps(self.marks)[1]), self.events, max_events)


class ObjectCounter(StepCounter):
    """The first pass over a trace in a layout the expressions do not read: fed each piece's parsed events
    (event_pieces.py), it keeps what StepCounter keeps from the text, in the same forms (pid and tid as their
    JSON text), and counts the complete events exactly."""

    SAMPLES = 4  # launches, kernels and starts sampled a piece (2 MB): denser than the text's pass (two a 4 MB block)

    def __init__(self) -> None:
        super().__init__()
        self.complete = 0

    def feed_events(self, events: list) -> None:
        launches, kernels, starts = [], [], []
        for event, ts, dur in complete_events(events):
            self.complete += 1
            starts.append(float(ts))
            name, category = event.get("name"), str(event.get("cat", ""))
            if isinstance(name, str) and name.startswith("ProfilerStep#"):
                number = re.match(r"\d*", name[len("ProfilerStep#"):]).group()
                self.marks.append((_json(event.get("pid")), _json(event.get("tid")), float(ts), float(dur),
                                   number.encode()))
            corr = correlation_id(event)
            if corr < 0:
                continue
            if category.endswith(("_runtime", "_driver")):
                launches.append((_json(event.get("pid")), float(ts), corr))
            elif category == "kernel":
                kernels.append((float(ts), corr))
        for pid, ts, corr in _sampled(launches, self.SAMPLES):
            self.launch_pid.append(pid)
            self.launch_ts.append(ts)
            self.launch_corr.append(corr)
        for ts, corr in _sampled(kernels, self.SAMPLES):
            self.kernel_ts.append(ts)
            self.kernel_corr.append(corr)
        self.starts.extend(_sampled(starts, self.SAMPLES))

    @property
    def events(self) -> int:
        return self.complete


def _sampled(items: list, count: int) -> list:
    """`count` items spread evenly from the first to the last (all of them when there are no more)."""
    if len(items) <= count:
        return items
    return [items[round(i * (len(items) - 1) / (count - 1))] for i in range(count)]


def _json(value) -> bytes:
    """A pid or tid as the text's pass reads it: its JSON text."""
    return orjson.dumps(value)


LAUNCH_LABELS = (b'_runtime"', b'_driver"')  # the categories' ends: cuda_runtime, hip_runtime, cuda_driver


def _first_and_last(text: bytes, limit: int, pattern: re.Pattern, labels: tuple[bytes, ...]) -> list:
    """The first and the last event of a kind that start before `limit`, found by their category's literal
    (fast), then read."""
    first = _searched(lambda label: text.find(label, 0, limit + len(label) - 1), labels)
    if first < 0:
        return []  # (none at all: no search from the end)
    found = []
    for position in (first, _searched(lambda label: text.rfind(label, 0, limit + len(label) - 1), labels)):
        match = pattern.match(text, position) if position >= 0 else None
        if match is not None and (not found or match.start() > found[0].start()):
            found.append(match)
    return found


def _searched(search, labels: tuple[bytes, ...]) -> int:
    """Where the first label that occurs is found (-1: none): the next label is searched only when the one before
    is absent (a search that finds nothing reads the whole piece)."""
    for label in labels:
        position = search(label)
        if position >= 0:
            return position
    return -1


def choose_kept_steps(marks: list[tuple], events: int, max_events: int,
                  launches: Iterable[tuple[bytes, float, int]] = (),
                  kernels: Iterable[tuple[float, int]] = (),
                  at: Optional[tuple[int, int]] = None, starts: Sequence[float] = (),
                  span: Optional[tuple[float, float]] = None) -> Optional[KeptSteps]:
    """The middle steps whose events (as many a step as the trace's average), with a step on each side, fit in
    `max_events` (one step at least); None when the whole trace fits or the budget is off (0). A trace with fewer
    than MIN_STEPS steps, or steps too big for a step and its two neighbours to fit: the middle span of time that
    holds about `max_events` (time_window; one step and its neighbours where no sampled starts place it).
    `launches`: (pid, ts, correlation id) of sampled runtime calls; `kernels`: (ts, correlation id) of sampled
    kernels; `starts`: sampled events' starts. `at`: (first step, steps), or `span`: (start, end), chosen for
    several ranks (a span: cut in time)."""
    if max_events <= 0 or (at is None and span is None and events <= max_events):
        return None
    launches, kernels = list(launches), list(kernels)
    main, steps = main_steps(marks) if marks else ((), [])
    thread = (thread_of_text(main[0]), thread_of_text(main[1])) if main else ()  # as the trace's spans name it
    too_big = len(steps) >= MIN_STEPS and steps_too_big(len(steps), events, max_events)
    if len(steps) < MIN_STEPS or span is not None:
        cause = "markers" if len(steps) < MIN_STEPS else "steps" if too_big else "ranks"
        return time_window(starts, len(steps), events, max_events, launches, kernels, thread, span, cause)
    if at is None and too_big:
        timed = time_window(starts, len(steps), events, max_events, launches, kernels, thread, span, "steps")
        if timed is not None:
            return timed
    kept = steps_kept(len(steps), events, max_events)
    first, keep = at if at is not None else ((len(steps) - kept) // 2, kept)
    if keep >= len(steps) or first + keep > len(steps):
        return None
    last = first + keep - 1
    keep_from, keep_until = steps[max(first - 1, 0)][0], steps[min(last + 1, len(steps) - 1)][1]
    lead_in, lead_out = first > 0, last + 1 < len(steps)
    low, high, by_launch, host_until = _device_bounds(launches, kernels, main[0], keep_from, keep_until, lead_in,
                                                      lead_out)
    return KeptSteps(first=first, last=last, steps=len(steps), events=events, max_events=max_events,
                     keep_from=keep_from, keep_until=keep_until, host_until=host_until, lead_in=lead_in,
                     lead_out=lead_out, main_thread=thread, corr_low=low, corr_high=high, by_launch=by_launch)


def _device_bounds(launches: list, kernels: list, pid: Optional[bytes], keep_from: float, keep_until: float,
                   lead_in: bool = True, lead_out: bool = True) -> tuple[int, int, bool, float]:
    """(lowest and highest correlation id the launches between keep_from and keep_until may have, whether they
    were bounded by sampled launches, how long host events are kept): from the launches of process `pid`, and
    of the only process that launched where `pid` is None (bounded by time where several did)."""
    if pid is None:
        pids = {launch[0] for launch in launches}
        pid = pids.pop() if len(pids) == 1 else None
    low, high = None, None  # corr ids grow with launch time in a process: the last before the steps, the first after
    for launched_by, ts, corr in launches:
        if launched_by != pid:
            continue  # another process counts its own ids
        if ts < keep_from:
            low = corr if low is None else max(low, corr)
        elif ts > keep_until:
            high = corr if high is None else min(high, corr)
    # a side with no launch sampled (and events beyond it) leaves the ids unbounded: device work is kept by time then
    by_launch = pid is not None and (low is not None or not lead_in) and (high is not None or not lead_out)
    # work launched after the window starts once the device is done with the window's (on its stream): the
    # earliest such kernel sampled bounds how long after keep_until the device still ran the window's work
    later = [ts for ts, corr in kernels if high is not None and corr > high]
    host_until = max(keep_until, min(later)) if later and by_launch else keep_until
    return low or 0, 1 << 62 if high is None else high, by_launch, host_until


def time_window(starts: Sequence[float], steps: int, events: int, max_events: int, launches: list = (),
                kernels: list = (), thread: tuple = (), span: Optional[tuple[float, float]] = None,
                cause: str = "markers") -> Optional[KeptSteps]:
    """The middle span of time that holds about `max_events` of the trace's `events`: between the quantiles of the
    sampled starts around their median (each block of the text weighs alike: where the events are dense in time,
    the span is short). `span`: (start, end) chosen for several ranks. Device work is kept as for steps
    (_device_bounds). None when too few starts were sampled to place it (the trace is then read whole)."""
    if len(starts) < 2:
        return None
    share = min(max_events / max(events, 1), 1.0)
    low, high, first, last = np.quantile(np.asarray(starts), [0.5 - share / 2, 0.5 + share / 2, 0.0, 1.0])
    low, high = span or (low, high)
    if high <= low:
        return None
    keep_from, keep_until = float(low), float(high)
    corr_low, corr_high, by_launch, host_until = _device_bounds(launches, kernels, None, keep_from, keep_until)
    return KeptSteps(first=0, last=0, steps=steps, events=events, max_events=max_events, keep_from=keep_from,
                     keep_until=keep_until, host_until=host_until, lead_in=False, lead_out=False, main_thread=thread,
                     corr_low=corr_low, corr_high=corr_high, by_launch=by_launch, by_time=True,
                     trace_us=float(last - first), cause=cause)


def main_steps(marks: list[tuple]) -> tuple[tuple, list[tuple[float, float, bytes]]]:
    """The thread with most markers (the first of them on a tie, as the analysis picks it), and its steps in order
    of their start: (start, end, ProfilerStep number)."""
    main = Counter((mark[0], mark[1]) for mark in marks).most_common(1)[0][0]
    return main, sorted(((mark[2], mark[2] + mark[3], mark[4]) for mark in marks if (mark[0], mark[1]) == main),
                        key=lambda step: step[0])


def steps_kept(steps: int, events: int, max_events: int) -> int:
    """How many steps fit in the budget, each with the trace's average events, the lead-in and lead-out counted."""
    return max(1, int(max_events * steps / max(events, 1)) - 2)


def steps_too_big(steps: int, events: int, max_events: int) -> bool:
    """Whether a step and its lead-in and lead-out steps, each with the trace's average events, are more than the
    budget holds: the trace is then cut in time (a step's figures need its neighbours: where the device stood when
    it began, what ran beside its end)."""
    return 3 * events > max_events * steps


def agreed_kept_steps(counters: list[Optional[StepCounter]], max_events: int) -> list[Optional[KeptSteps]]:
    """Windows of the same steps for the ranks of one job (a per-rank table compares the same steps): as many as
    fit in the budget in the rank that fits fewest, from the same step on (by its ProfilerStep number, where every
    rank numbers its steps; by position otherwise); none when every rank fits whole. A rank with too few steps
    to cut at is cut in time, all such ranks over the same span (shared_span)."""
    if max_events <= 0:
        return [None] * len(counters)
    present = [c for c in counters if c is not None]
    # one rank whose steps are past the budget: every rank is cut in time, over one span (the same stretch)
    all_fit = all(c.cut_at_steps(max_events) for c in present if c.stepped)
    by_steps = [c for c in present if c.stepped and all_fit]
    span = shared_span([c for c in present if c not in by_steps], max_events)
    timed = [c.kept_steps(max_events, span=span if c.reaches(span) else None)
             if c is not None and c not in by_steps and span is not None else None for c in counters]
    if not any(c.events > max_events for c in by_steps):
        return timed
    numbers = [[number for _, _, number in main_steps(c.marks)[1]] for c in by_steps]
    keep = min(steps_kept(len(n), c.events, max_events) for n, c in zip(numbers, by_steps))
    common = set.intersection(*(set(n) for n in numbers))
    shared = [n for n in numbers[0] if n in common] if all(all(n) for n in numbers) else []
    if len(shared) > keep:  # numbered alike: the middle of the steps every rank has
        first_number = shared[(len(shared) - keep) // 2]
        starts = {id(c): n.index(first_number) for n, c in zip(numbers, by_steps)}
    else:
        starts = {id(c): max((min(len(n) for n in numbers) - keep) // 2, 0) for c in by_steps}
    return [c.kept_steps(max_events, at=(starts[id(c)], keep)) if c is not None and c in by_steps else window
            for c, window in zip(counters, timed)]


def shared_span(counters: list[StepCounter], max_events: int) -> Optional[tuple[float, float]]:
    """One span of time for the ranks of a job cut in time, so that their rows compare the same stretch of
    training: as long as the shortest of their own spans, centred on the middle of their own spans' middles;
    None when none of them passes the budget (each is then read whole)."""
    own = [w for w in (c.kept_steps(max_events) for c in counters) if w is not None]
    if not own:
        return None
    middle = float(np.median([(w.keep_from + w.keep_until) / 2 for w in own]))
    half = min(w.keep_until - w.keep_from for w in own) / 2
    return middle - half, middle + half


def spans_in(window: KeptSteps, kind: str, parts: Iterable[Spans]) -> list[Spans]:
    """The spans of the window's steps and of its lead-in and lead-out steps: the steps themselves, what overlaps
    them in time, and on the device also the work their launches queued, however late it ran."""
    kept = (p.take(np.flatnonzero(_keep(window, kind, p))) for p in parts)
    return [spans for spans in kept if len(spans)]  # (a piece outside the window leaves nothing, not empty arrays)


def _keep(window: KeptSteps, kind: str, spans: Spans) -> np.ndarray:
    if kind == "step" and window.by_time:  # too few to cut at: the span of time is the step
        return np.zeros(len(spans), dtype=bool)
    if kind == "step":  # the main thread's markers only: the analysis then picks that thread again
        on_main = spans.thread_mask(lambda thread: thread == window.main_thread)
        return on_main & (spans.start >= window.keep_from) & (spans.start < window.keep_until)
    overlaps = (spans.end >= window.keep_from) & (spans.start <= window.host_until)
    if kind not in DEVICE_KINDS or not window.by_launch:
        return overlaps
    corr = spans.correlations()  # linked work where its launch was kept, unlinked work where it ran in time
    # (cut in time, work launched before the span that ran in it is kept too: the span has no lead-in step)
    return ((corr >= window.corr_low) & (corr <= window.corr_high)) | (((corr < 0) | window.by_time) & overlaps)


# Allocations and FLOP ops are counted per host step: kept to the lead-out step's end, not to host_until
def memory_in(window: KeptSteps, events: MemoryEvents) -> MemoryEvents:
    keep = np.flatnonzero((events.ts >= window.keep_from) & (events.ts <= window.keep_until))
    if len(keep) == len(events) or not len(keep):
        return events if len(keep) else MemoryEvents()
    return events.take(keep)


def flops_in(window: KeptSteps, ops: FlopOps) -> FlopOps:
    keep = np.flatnonzero((ops.ts + ops.dur >= window.keep_from) & (ops.ts <= window.keep_until))
    if len(keep) == len(ops) or not len(keep):  # (none: not even the piece's table of kinds is kept)
        return ops if len(keep) else FlopOps()
    return ops.take(keep)
