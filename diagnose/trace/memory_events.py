"""The profiler's memory events (`profile_memory=True`): one `[memory]` instant per allocation and free, with the
allocator's running totals. Read straight from the trace's bytes as Kineto lays them out (regular expressions, one
pass each over the chunk), else each event's object parsed as JSON, all of them in one call. On CUDA the totals are
the caching allocator's own (absolute); on the host they count from zero when the profiler started."""
from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field
from typing import Iterable, NamedTuple, Optional

import numpy as np
import orjson

from diagnose.trace import jitscan
from diagnose.trace.classify import thread_of_text
from diagnose.trace.patterns import ID, NUMBER, SEP, compiled

CPU, CUDA = 0, 1  # Kineto's device types ("Device Type"): ROCm's GPUs are written as CUDA too

# what Kineto writes before every memory event's args; the args' keys are in a hash map's order, which differs
# between torch versions ("Total Reserved" first in 2.13, "Device Type" in 1.x) but not within one trace: they are
# read in the order of the chunk's first event (_layout), else one key at a time
HEADER = (rb'"\[memory\]"' + SEP + rb'"pid":\s*' + ID + SEP + rb'"tid":\s*' + ID + SEP + rb'"ts":\s*' + NUMBER + SEP
          + rb'"args":\s*\{')
MEMORY_EVENT = compiled(HEADER + rb'([^{}]*)\}')
MARK = b'"[memory]"'
MARK_AT = re.compile(re.escape(MARK))
ARGS_APART = b"\x00"  # between the args' texts joined (no JSON text holds it raw)
# (column, key): the args read; an event without "Total Allocated" is not an allocator's, and is left out
ARG_KEYS = (("allocated", b"Total Allocated"), ("reserved", b"Total Reserved"), ("nbytes", b"Bytes"),
            ("device_type", b"Device Type"))
# each event's value of one key, or b"" where its args lack it: one match per event (each begins at ARGS_APART)
ARG_VALUES = {column: compiled(rb'\x00(?:[^\x00]*?"' + key + rb'":\s*' + NUMBER + rb')?') for column, key in ARG_KEYS}


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
    return memory_events_between(raw, 0, len(raw))


def memory_events_between(raw: bytes, start: int, end: int) -> MemoryEvents:
    """The memory events of raw[start:end] (whole events: cut where an event's "ph" begins)."""
    at = raw.find(MARK, start, end)
    if at < 0:
        return MemoryEvents()
    # Kineto writes a thread's instant events together: the expressions search only from the first memory event
    # to the event after the last (bytes.find's search is several times faster than the expressions' scan)
    after = raw.find(b'"ph"', raw.rfind(MARK, at, end), end)
    stop = end if after < 0 else after
    count = raw.count(MARK, at, stop)
    first = MEMORY_EVENT.match(raw, at)
    layout = _layout(_arg_names(first.group(4))) if first else None
    found = layout.expression.findall(raw, at, stop) if layout else []
    if len(found) == count:  # one pass: every event's args in the first one's order, as one build of torch writes
        pids, tids, ts, *values = zip(*found)
        return _events(pids, tids, ts, dict(zip(layout.columns, values)))
    found = MEMORY_EVENT.findall(raw, at, stop)
    if len(found) != count:  # some laid out otherwise: each event's object parsed
        return _from_objects(raw, start, end)
    pids, tids, ts, args = zip(*found)  # the args in several orders: each key read apart
    joined = ARGS_APART + ARGS_APART.join(args)
    return _events(pids, tids, ts, {column: ARG_VALUES[column].findall(joined) for column, _ in ARG_KEYS})


def memory_of_scan(raw: bytes, scanned: jitscan.ScannedMemory) -> Optional[MemoryEvents]:
    """The memory events the compiled scanner read (the expressions' values: the allocator's events, integers as
    int() reads them, ts as float()), each thread decoded once; None when two threads share a hash (the
    expressions then read them)."""
    keep = np.flatnonzero(scanned.rows[:, 7] == 1)
    if not len(keep):
        return MemoryEvents()
    rows = scanned.rows[keep]
    _, first, inverse = np.unique(scanned.thread_hash[keep], return_index=True, return_inverse=True)
    inverse = inverse.ravel()
    if not jitscan.same_bytes(raw, np.ascontiguousarray(rows[:, 1:5]), first[inverse]):
        return None
    table = [(thread_of_text(raw[a:b]), thread_of_text(raw[c:d])) for a, b, c, d in rows[first, 1:5].tolist()]
    amounts = scanned.amounts[keep]
    return MemoryEvents(ts=scanned.ts[keep], allocated=amounts[:, 0].copy(), reserved=amounts[:, 1].copy(),
                        nbytes=amounts[:, 2].copy(), device_type=amounts[:, 3].copy(),
                        tids=tuple(map(table.__getitem__, inverse.tolist())))


def _events(pids: tuple, tids: tuple, ts: tuple, values: dict[str, tuple]) -> MemoryEvents:
    """The events read, as columns of their texts; those without "Total Allocated" left out."""
    allocator = np.flatnonzero(np.array(values["allocated"]) != b"")
    return MemoryEvents(ts=_numbers(ts)[allocator], tids=_threads(pids, tids, allocator),
                        **{column: _integers(values[column])[allocator] for column, _ in ARG_KEYS})


class _Layout(NamedTuple):
    expression: re.Pattern  # a memory event, its args' keys in one order: (pid, tid, ts, the columns' values)
    columns: tuple[str, ...]  # the columns its last groups give, in order


ARG_NAME = re.compile(rb'"([^"\\]*)"\s*:')
ARG_SCALAR = rb'(?:"[^"\\]*"|[^,{}"\[\]\s][^,{}"\[\]]*)'  # a value not read: a string or a number, true...


@functools.lru_cache(maxsize=8)
def _layout(names: tuple[bytes, ...]) -> Optional[_Layout]:
    """The expression for memory events whose args have these keys in this order; None when one read is missing."""
    column_of = {key: column for column, key in ARG_KEYS}
    if not all(key in names for _, key in ARG_KEYS):
        return None
    members = [b'"' + re.escape(name) + rb'":\s*' + (NUMBER if name in column_of else ARG_SCALAR) for name in names]
    expression = compiled(HEADER + rb'\s*' + SEP.join(members) + rb'\s*\}')
    return _Layout(expression, tuple(column_of[name] for name in names if name in column_of))


def _arg_names(args: bytes) -> tuple[bytes, ...]:
    return tuple(ARG_NAME.findall(args))


def _numbers(texts: tuple) -> np.ndarray:
    """The numbers' texts parsed by numpy (the same correctly rounded parse as Python's float); b"" is 0."""
    text = np.array(texts)
    return np.where(text == b"", b"0", text).astype(np.float64)


def _integers(texts: tuple) -> np.ndarray:
    """Integers' texts (byte counts, device types), as int() reads them, the object parser too; through a float
    where one is not an integer's (b"": 0)."""
    try:
        return np.fromiter(map(int, texts), dtype=np.int64, count=len(texts))
    except (ValueError, OverflowError):
        return _numbers(texts).astype(np.int64)


def _threads(pids: tuple, tids: tuple, keep: np.ndarray) -> tuple:
    """The (pid, tid) of the events at `keep`, each distinct pair's text decoded once."""
    pairs = list(zip(pids, tids)) if len(keep) == len(pids) else [(pids[i], tids[i]) for i in keep.tolist()]
    decoded = {pair: (thread_of_text(pair[0]), thread_of_text(pair[1])) for pair in set(pairs)}
    return tuple(map(decoded.__getitem__, pairs))


def _from_objects(raw: bytes, start: int, end: int) -> MemoryEvents:
    """The memory events of a layout the expression does not read: each event's object runs from the last `{`
    before its name to the second `}` after it (its args, the one object in it, hold numbers only); all are parsed
    in one call, one by one only where that fails (an object that is not one, left out)."""
    marks = [found.start() for found in MARK_AT.finditer(raw, start, end)]
    texts = [raw[raw.rfind(b"{", 0, at):raw.find(b"}", raw.find(b"}", at) + 1) + 1] for at in marks]
    try:
        objects = orjson.loads(b"[" + b",".join(texts) + b"]")
    except orjson.JSONDecodeError:
        objects = [_parsed(text) for text in texts]
    return memory_of_events(objects)


def _parsed(text: bytes):
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:
        return None


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
