"""Spans: the events of one kind from a trace (start, end, name, thread, correlation id), held as arrays so
that the analysis can mask, sort and intersect them without a Python object per event. Names and threads repeat
a lot (a step's ops recur every step): each is held as a small integer code into a table of distinct values,
4 bytes a span instead of a Python list's 8-byte pointer, and a subset or a mask costs numpy's time only."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional, Sequence

import numpy as np

from diagnose.trace import jitscan
from diagnose.trace.jitscan import CODE
from diagnose.trace.release import give_back_freed_memory


def _no_codes() -> np.ndarray:
    return np.zeros(0, dtype=CODE)


@dataclass
class Spans:
    """Spans of one kind: start, end (us), the codes of their names and threads (indices into `name_table` and
    `thread_table`, which may also hold values that no span here has, once a subset is taken) and correlation
    ids (CUDA's launch -> device work link, -1: none; an empty array where no span has one, as a host op)."""
    start: np.ndarray = field(default_factory=lambda: np.zeros(0))
    end: np.ndarray = field(default_factory=lambda: np.zeros(0))
    name_codes: np.ndarray = field(default_factory=_no_codes)
    name_table: list[str] = field(default_factory=list)
    thread_codes_: np.ndarray = field(default_factory=_no_codes)
    thread_table: list = field(default_factory=list)
    corr: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))

    @classmethod
    def of(cls, rows: list[tuple]) -> "Spans":
        if not rows:
            return cls()
        ts, dur, names, tids, *corr = zip(*rows)  # (ts, dur, name, tid[, correlation])
        start = np.asarray(ts, dtype=np.float64)
        return cls.from_lists(start, start + np.asarray(dur, dtype=np.float64), names, tids,
                              np.asarray(corr[0] if corr else [-1] * len(names), dtype=np.int64))

    @classmethod
    def from_lists(cls, start: np.ndarray, end: np.ndarray, names: Sequence[str], tids: Sequence,
                   corr: np.ndarray) -> "Spans":
        name_codes, name_table = codes_of(names)
        thread_codes, thread_table = codes_of(tids)
        return cls(start, end, name_codes, name_table, thread_codes, thread_table, corr)

    def __len__(self) -> int:
        return len(self.start)

    @property
    def names(self) -> list[str]:
        """Every span's name, as a list (built on each call: index `name_codes` in a loop instead)."""
        return [self.name_table[c] for c in self.name_codes.tolist()]

    @property
    def tids(self) -> list:
        """Every span's (pid, tid), as a list (built on each call: index `thread_codes_` in a loop instead)."""
        return [self.thread_table[c] for c in self.thread_codes_.tolist()]

    def name(self, i: int) -> str:
        return self.name_table[self.name_codes[i]]

    def intervals(self, mask: Optional[np.ndarray] = None) -> np.ndarray:
        if mask is None:
            return np.column_stack([self.start, self.end])
        return np.column_stack([self.start[mask], self.end[mask]])

    def mask(self, predicate) -> np.ndarray:
        """predicate(name) for every span, evaluated once per distinct name."""
        return _where(self.name_codes, self.name_table, predicate)

    def take(self, index: np.ndarray) -> "Spans":
        """The spans at `index` (their codes keep indexing the same tables)."""
        return Spans(self.start[index], self.end[index], self.name_codes[index], self.name_table,
                     self.thread_codes_[index], self.thread_table, self.corr[index] if self._linked() else self.corr)

    def correlations(self) -> np.ndarray:
        """Correlation ids (launch -> device work), -1 where an event has none."""
        return self.corr if self._linked() else np.full(len(self.start), -1, dtype=np.int64)

    def _linked(self) -> bool:
        return len(self.corr) == len(self.start)

    def where_thread(self, predicate) -> "Spans":
        """The spans whose (pid, tid) satisfies predicate, evaluated once per distinct thread."""
        keep = self.thread_mask(predicate)
        return self if keep.all() else self.take(np.flatnonzero(keep))  # all kept: no copy of a big trace's spans

    def thread_mask(self, predicate) -> np.ndarray:
        """predicate(thread) for every span, evaluated once per distinct thread."""
        return _where(self.thread_codes_, self.thread_table, predicate)

    def thread_codes(self) -> tuple[np.ndarray, list]:
        """Each span's thread as an index into the table of threads."""
        return self.thread_codes_, self.thread_table

    def threads_present(self, mask: Optional[np.ndarray] = None) -> list:
        """The threads these spans (those `mask` picks) are on, in order of first appearance."""
        codes = self.thread_codes_ if mask is None else self.thread_codes_[mask]
        return [self.thread_table[c] for c in present_in_order(codes).tolist()]

    def sorted(self) -> "Spans":
        return self.take(np.argsort(self.start, kind="stable"))

    @classmethod
    def concat(cls, parts: list["Spans"]) -> "Spans":
        return cls._joined(parts, spend=False)

    @classmethod
    def gathered(cls, parts: list["Spans"]) -> "Spans":
        """concat, emptying each part's arrays once they are copied (the parts are spent), and giving the freed
        memory back after each column: the join then holds about one column of the result beside the parts, not a
        second copy of every span (a big trace's arrays come in pieces)."""
        return cls._joined(parts, spend=True)

    @classmethod
    def _joined(cls, parts: list["Spans"], spend: bool) -> "Spans":
        parts = [p for p in parts if len(p)]
        if len(parts) <= 1:
            return parts[0] if parts else cls()
        linked = any(p._linked() for p in parts)
        size = sum(len(p) for p in parts)  # taken before any part is spent
        name_table = merged_table([p.name_table for p in parts])
        thread_table = merged_table([p.thread_table for p in parts])
        # correlations first: a part's -1s are as many as its starts, which must not be spent yet
        corr = _join(parts, "corr", size, spend) if linked else np.zeros(0, dtype=np.int64)
        return cls(_join(parts, "start", size, spend), _join(parts, "end", size, spend),
                   _join(parts, "name_codes", size, spend, name_table), list(name_table),
                   _join(parts, "thread_codes_", size, spend, thread_table), list(thread_table), corr)

    def factorized(self) -> tuple[np.ndarray, list[str]]:
        """Each span's name as an index into the table of names."""
        return self.name_codes, self.name_table


def codes_of(values: Sequence) -> tuple[np.ndarray, list]:
    """Each value as an index into its distinct values (in order of first appearance)."""
    index: dict = {}
    codes = np.fromiter((index.setdefault(v, len(index)) for v in values), dtype=CODE, count=len(values))
    return codes, list(index)


def present_in_order(codes: np.ndarray) -> np.ndarray:
    """The codes that occur, in order of their first occurrence."""
    kernels = jitscan.for_size(len(codes))
    if kernels is not None and len(codes) and codes.dtype == CODE:  # a big trace: one pass (np.unique sorts a copy)
        table = int(codes.max()) + 1
        out = np.empty(min(table, len(codes)), dtype=CODE)
        n = kernels.walk_first_seen(np.ascontiguousarray(codes), np.full(table, -1, dtype=np.int64), out)
        if n >= 0:  # (-1: a negative code, which numpy's form takes as it is)
            return out[:n].copy()
    present, first = np.unique(codes, return_index=True)
    return present[np.argsort(first, kind="stable")]


def threads_where(thread_codes: tuple[np.ndarray, list], predicate) -> np.ndarray:
    """predicate(thread) for each coded thread, evaluated once per distinct thread."""
    return _where(*thread_codes, predicate)


def _where(codes: np.ndarray, table: list, predicate) -> np.ndarray:
    return np.fromiter((bool(predicate(v)) for v in table), dtype=bool, count=len(table))[codes]


def merged_table(tables: list[list]) -> dict:
    """Each value of every table, once, with its code in the merged table (in order of first appearance)."""
    index: dict = {}
    for table in tables:
        for value in table:
            index.setdefault(value, len(index))
    return index


def recoded(codes: np.ndarray, table: list, merged: dict) -> np.ndarray:
    """Codes into `table`, as codes into the merged table `merged` (merged_table's)."""
    return np.fromiter((merged[v] for v in table), dtype=CODE, count=len(table))[codes]


def _join(parts: list[Spans], column: str, size: int, spend: bool, merged: Optional[dict] = None) -> np.ndarray:
    """One column of every part, end to end (codes recoded into `merged`); `spend` empties each part's column
    once it is copied. np.empty maps the result lazily: its pages are resident only as the parts fill them."""
    dtype = np.int64 if column == "corr" else getattr(parts[0], column).dtype
    out = np.empty(size, dtype=dtype)
    at = 0
    for part in parts:
        values = part.correlations() if column == "corr" else getattr(part, column)  # -1s where a part has none
        if merged is not None:
            values = recoded(values, part.name_table if column == "name_codes" else part.thread_table, merged)
        out[at:at + len(values)] = values
        at += len(values)
        if spend:
            setattr(part, column, np.zeros(0, dtype=dtype))
    if at != size:  # a part given twice to a spending join: its second copy was empty
        raise ValueError(f"joined {at} of {size} spans")
    if spend:
        give_back_freed_memory()
    return out


def in_start_order(starts: np.ndarray, calls: np.ndarray) -> np.ndarray:
    """`calls` in order of start (stably): as they are when they are already (a thread's calls usually are)."""
    kernels = jitscan.for_size(len(calls))
    if kernels is not None and kernels.ascending(starts, calls):
        return calls
    return calls[np.argsort(starts[calls], kind="stable")]
