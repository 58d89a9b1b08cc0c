"""Spans: the events of one kind from a trace (start, end, name, thread, correlation id), held as arrays so
that the analysis can mask, sort and intersect them without a Python object per event."""
from __future__ import annotations

from dataclasses import dataclass, field
from itertools import chain
from typing import Optional

import numpy as np


@dataclass
class Spans:
    """Spans of one kind: start, end (us) and names, as arrays."""
    start: np.ndarray = field(default_factory=lambda: np.zeros(0))
    end: np.ndarray = field(default_factory=lambda: np.zeros(0))
    names: list[str] = field(default_factory=list)
    tids: list = field(default_factory=list)
    corr: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))  # CUDA correlation id, -1: none
    _codes: Optional[np.ndarray] = field(default=None, repr=False, compare=False)
    _uniques: list[str] = field(default_factory=list, repr=False, compare=False)

    @classmethod
    def of(cls, rows: list[tuple]) -> "Spans":
        if not rows:
            return cls()
        ts, dur, names, tids, *corr = zip(*rows)  # (ts, dur, name, tid[, correlation])
        start = np.asarray(ts, dtype=np.float64)
        return cls(start, start + np.asarray(dur, dtype=np.float64), list(names), list(tids),
                   np.asarray(corr[0] if corr else [-1] * len(names), dtype=np.int64))

    def __len__(self) -> int:
        return len(self.names)

    def intervals(self, mask: Optional[np.ndarray] = None) -> np.ndarray:
        if mask is None:
            return np.column_stack([self.start, self.end])
        return np.column_stack([self.start[mask], self.end[mask]])

    def mask(self, predicate) -> np.ndarray:
        """predicate(name) for every span, evaluated once per distinct name (names repeat a lot)."""
        codes, uniques = self.factorized()
        return np.fromiter((predicate(n) for n in uniques), dtype=bool, count=len(uniques))[codes]

    def take(self, index: np.ndarray) -> "Spans":
        picks = index.tolist()
        return Spans(self.start[index], self.end[index], [self.names[i] for i in picks], [self.tids[i] for i in picks],
                     self.correlations()[index])

    def correlations(self) -> np.ndarray:
        """Correlation ids (launch -> device work), -1 where an event has none."""
        if len(self.corr) != len(self.names):
            self.corr = np.full(len(self.names), -1, dtype=np.int64)
        return self.corr

    def where_thread(self, predicate) -> "Spans":
        """The spans whose (pid, tid) satisfies predicate, evaluated once per distinct thread."""
        codes, threads = self.thread_codes()
        keep = np.fromiter((bool(predicate(t)) for t in threads), dtype=bool, count=len(threads))
        return self.take(np.flatnonzero(keep[codes])) if len(self) else self

    def thread_codes(self) -> tuple[np.ndarray, list]:
        """Each span's thread as an index into the distinct threads (in order of first appearance)."""
        index: dict = {}
        codes = np.asarray([index.setdefault(t, len(index)) for t in self.tids], dtype=np.int64)
        return codes, list(index)

    def sorted(self) -> "Spans":
        return self.take(np.argsort(self.start, kind="stable"))

    @classmethod
    def concat(cls, parts: list["Spans"]) -> "Spans":
        parts = [p for p in parts if len(p)]
        if not parts:
            return cls()
        return cls(np.concatenate([p.start for p in parts]), np.concatenate([p.end for p in parts]),
                   list(chain.from_iterable(p.names for p in parts)), list(chain.from_iterable(p.tids for p in parts)),
                   np.concatenate([p.correlations() for p in parts]))

    def factorized(self) -> tuple[np.ndarray, list[str]]:
        if self._codes is None:
            index: dict[str, int] = {}
            codes = np.fromiter((index.setdefault(n, len(index)) for n in self.names), dtype=np.int64,
                                count=len(self.names))
            self._codes, self._uniques = codes, list(index)
        return self._codes, self._uniques
