"""The profiler's memory events (`profile_memory=True`): one `[memory]` instant per allocation and free, with the
allocator's running totals. Read straight from the trace's bytes as Kineto lays them out (one regular expression),
else each event object on its own. On CUDA the totals are the caching allocator's own (absolute); on the host
they count from zero when the profiler started."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable, Optional

import numpy as np
import orjson

from diagnose.analysis.classify import thread_of_text
from diagnose.analysis.patterns import ID, NUMBER, compiled

CPU, CUDA = 0, 1  # Kineto's device types ("Device Type"): ROCm's GPUs are written as CUDA too

MEMORY_EVENT = compiled(rb'"\[memory\]",\s*"pid":\s*' + ID + rb',\s*"tid":\s*' + ID + rb',\s*"ts":\s*' + NUMBER
                          + rb',\s*"args":\s*\{\s*"Total Reserved":\s*' + NUMBER + rb',\s*"Total Allocated":\s*'
                          + NUMBER + rb',\s*"Bytes":\s*' + NUMBER + rb',\s*"Device Id":\s*' + NUMBER
                          + rb',\s*"Device Type":\s*' + NUMBER)
MARK = b'"[memory]"'


@dataclass
class MemoryEvents:
    ts: np.ndarray = field(default_factory=lambda: np.zeros(0))  # microseconds, as the trace's other events
    allocated: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))  # running total after it
    reserved: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    nbytes: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))  # negative: a free
    device_type: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    tids: tuple = ()  # (pid, tid) of the thread that allocated or freed

    def __len__(self) -> int:
        return len(self.ts)

    @classmethod
    def concat(cls, parts: list["MemoryEvents"]) -> "MemoryEvents":
        """Several pieces' events, in order (a streamed trace's)."""
        parts = [p for p in parts if len(p)]
        if len(parts) <= 1:
            return parts[0] if parts else cls()
        return cls(np.concatenate([p.ts for p in parts]), np.concatenate([p.allocated for p in parts]),
                   np.concatenate([p.reserved for p in parts]), np.concatenate([p.nbytes for p in parts]),
                   np.concatenate([p.device_type for p in parts]), tuple(t for p in parts for t in p.tids))

    def of_device(self, device_type: int) -> "MemoryEvents":
        keep = np.flatnonzero(self.device_type == device_type)
        return self.take(keep[np.argsort(self.ts[keep], kind="stable")])

    def take(self, index: np.ndarray) -> "MemoryEvents":
        """The events at `index`, in its order."""
        return MemoryEvents(self.ts[index], self.allocated[index], self.reserved[index], self.nbytes[index],
                            self.device_type[index], tuple(self.tids[i] for i in index.tolist()))


def read_memory_events(raw: bytes) -> MemoryEvents:
    found = memory_events_between(raw, 0, len(raw))
    return _from_objects(raw) if found is None else found  # another layout: each event's object on its own


def memory_events_between(raw: bytes, start: int, end: int) -> Optional[MemoryEvents]:
    """The memory events of raw[start:end] (whole events: cut where an event's "ph" begins); None when some are
    not laid out as the expression reads them."""
    if raw.find(MARK, start, end) < 0:
        return MemoryEvents()
    found = MEMORY_EVENT.findall(raw, start, end)
    if len(found) != raw.count(MARK, start, end):
        return None
    pids, tids, ts, reserved, allocated, nbytes, _, device = zip(*found)
    return MemoryEvents(
        ts=np.array([float(t) for t in ts]),
        allocated=np.array([int(float(v)) for v in allocated], dtype=np.int64),
        reserved=np.array([int(float(v)) for v in reserved], dtype=np.int64),
        nbytes=np.array([int(float(v)) for v in nbytes], dtype=np.int64),
        device_type=np.array([int(float(v)) for v in device], dtype=np.int64),
        tids=tuple(zip(map(thread_of_text, pids), map(thread_of_text, tids))))


def _from_objects(raw: bytes) -> MemoryEvents:
    objects = []
    start = raw.find(MARK)
    while start >= 0:
        objects.append(_enclosing_object(raw, start))
        start = raw.find(MARK, start + len(MARK))
    return memory_of_events(objects)


def memory_of_events(events: Iterable) -> MemoryEvents:
    """The memory events among parsed event objects (a trace in a layout the expression does not read)."""
    rows = []
    for event in events:
        args = event.get("args") if isinstance(event, dict) and event.get("name") == "[memory]" else None
        if isinstance(args, dict) and "Total Allocated" in args:
            rows.append((float(event.get("ts", 0.0)), int(args.get("Total Allocated", 0)),
                         int(args.get("Total Reserved", 0)), int(args.get("Bytes", 0)), int(args.get("Device Type", 0)),
                         (event.get("pid"), event.get("tid"))))
    if not rows:
        return MemoryEvents()
    ts, allocated, reserved, nbytes, device, tids = zip(*rows)
    return MemoryEvents(np.array(ts), np.array(allocated, dtype=np.int64), np.array(reserved, dtype=np.int64),
                        np.array(nbytes, dtype=np.int64), np.array(device, dtype=np.int64), tuple(tids))


def _enclosing_object(raw: bytes, at: int):
    """The event object around position `at`: from the `{` that opens it to its matching `}`."""
    begin = raw.rfind(b"{", 0, at)
    depth, end = 0, begin
    while end < len(raw):
        char = raw[end:end + 1]
        if char == b"{":
            depth += 1
        elif char == b"}":
            depth -= 1
            if depth == 0:
                break
        end += 1
    try:
        return orjson.loads(raw[begin:end + 1])
    except orjson.JSONDecodeError:
        return None
