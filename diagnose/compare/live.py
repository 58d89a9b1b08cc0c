"""An interleaved comparison: A and B, two versions of a training script, timed side by side in one job.

A round starts a fresh process of each (no profiler, as the experiments' timed runs); both warm up, then they take
turns, one timed window each (experiments/turns.py), A B B A A B ..., until the round has its pairs. Rounds go on
until the interval decides (the gate's allowance lies outside it; with no gate, it is within 2%) or the budget is
spent: at least two rounds, so that one pair of processes' own luck cannot decide alone (compare/interleaved.py)."""
from __future__ import annotations

import errno
import os
import queue
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

import psutil

from diagnose.capture.runner import run_in_child
from diagnose.compare.interleaved import Interval, decided, gate_decision, interval, pair_log_ratios, verdict
from diagnose.experiments.scheduler import TIMED_ENTRY
from diagnose.experiments.turns import GO, STOP, parse_ready_line, parse_window_line
from diagnose.model import (
    LiveComparison,
    LiveGate,
    LiveRound,
    LiveSide,
    LiveWindow,
    Measurement,
    MeasurePlan,
    RunConfig,
    Status,
    Verdict,
)
from diagnose.record.run_record import RunRecord

MIN_ROUNDS = 3  # fresh pairs of processes before any decision: a process's own luck shows only across rounds
MIN_ROUND_PAIRS = 64  # ...each with this many pairs at least (a round just begun would leave the others to decide)
CHECK_EVERY_PAIRS = 8  # once it may decide, the interval is looked at every this many pairs
ROUND_SHARE = 0.12  # a round's turns stop after this share of the budget (several rounds: processes' luck)...
MIN_TURNS_S = 15.0  # ...or after this long, if longer
# a turn: short, so that both sides of a pair see the same machine. On a shared 2-core VM a pair's ratio spread
# about 11% whatever the window (0.05 to 1 s), so short windows give more pairs a second: the interval's half-width
# after 60 s of turns was 0.45% at 0.05 s, 0.66% at 0.1 s, 1.5% at 0.5 s, 2% at 1 s (docs/guide/ci-gate.md). At
# 0.1 s a window of 10 ms steps holds about nine: fewer make the pair's ratio move in whole steps
WINDOW_S = 0.1
WARMUP_STEPS, WARMUP_S = 5, 1.0
STOP_MARGIN_S = 3.0  # left at the deadline for both processes to stop and write what they measured
TURN_TIMEOUT_S = 120.0  # a turn with no window after this long: the side is taken as hung (at least)


@dataclass(frozen=True)
class SideToRun:
    label: str  # A | B
    script: str
    script_args: tuple[str, ...] = ()
    environment: tuple[tuple[str, str], ...] = ()
    revision: Optional[str] = None


class LiveInterrupted(Exception):
    """Ctrl-C during an interleaved comparison: both processes were stopped."""


def compare_live(a: SideToRun, b: SideToRun, out_dir: Path, budget_s: float,
                 allowed_slowdown_pct: Optional[float] = None,
                 on_progress: Callable[[str], None] = lambda line: None) -> LiveComparison:
    started = time.monotonic()
    deadline = started + budget_s
    rounds: list[LiveRound] = []
    errors: dict[str, str] = {}
    stopped = "budget"
    found: Optional[Interval] = None
    while True:
        found = interval([r.pair_log_ratios for r in rounds])
        if found is not None and len(rounds) >= MIN_ROUNDS and decided(found, allowed_slowdown_pct):
            stopped = "decided"
            break
        if rounds and deadline - time.monotonic() < _typical_round_s(rounds):
            break
        on_progress(f"round {len(rounds) + 1}")
        earlier = [r.pair_log_ratios for r in rounds]

        def settled(pairs: tuple[float, ...]) -> bool:  # the round may stop early once the interval decides
            if len(earlier) + 1 < MIN_ROUNDS or len(pairs) < MIN_ROUND_PAIRS:
                return False
            so_far = interval([*earlier, pairs])
            return so_far is not None and decided(so_far, allowed_slowdown_pct)

        order = (a, b) if len(rounds) % 2 == 0 else (b, a)
        turns = _Round(len(rounds) + 1, order, RunRecord(out_dir).files.live_rounds, deadline,
                       max(MIN_TURNS_S, ROUND_SHARE * budget_s), on_progress, settled)
        rounds.append(turns.run())
        errors.update(turns.errors)
        if errors:
            stopped = "failed"
            break
        if turns.interrupted:
            raise LiveInterrupted()
    return _comparison(a, b, rounds, found, errors, budget_s, time.monotonic() - started, stopped,
                       allowed_slowdown_pct)


def _typical_round_s(rounds: list[LiveRound]) -> float:
    return sorted(r.seconds for r in rounds)[len(rounds) // 2]


def _comparison(a: SideToRun, b: SideToRun, rounds: list[LiveRound], found: Optional[Interval],
                errors: dict[str, str], budget_s: float, spent_s: float, stopped: str,
                allowed_slowdown_pct: Optional[float]) -> LiveComparison:
    sides = tuple(_side(s, rounds, errors.get(s.label)) for s in (a, b))
    if found is None:
        notes = ("no two windows of A and B ran next to each other: nothing to compare",) if not errors else ()
        gate = LiveGate(allowed_slowdown_pct, "undecided", False) if allowed_slowdown_pct is not None else None
        return LiveComparison(1, *sides, None, None, Verdict.FAILED if errors else Verdict.UNDECIDED, 0, 0.0, 0.0,
                              0.0, tuple(rounds), budget_s, spent_s, stopped, gate, notes)
    gate = None
    if allowed_slowdown_pct is not None:
        decision = gate_decision(found.ci, allowed_slowdown_pct)
        gate = LiveGate(allowed_slowdown_pct, decision, decision == "fail")
    return LiveComparison(1, *sides, found.ratio, found.ci, Verdict.FAILED if errors else verdict(found.ci),
                          found.pairs, found.pair_sd, found.process_sd, found.df, tuple(rounds), budget_s, spent_s,
                          stopped, gate, _notes(rounds, found), found.trim)


def _side(side: SideToRun, rounds: list[LiveRound], error: Optional[str]) -> LiveSide:
    windows = [w for r in rounds for w in r.windows if w.side == side.label]
    steps = sum(w.steps for w in windows)
    step_s = sum(w.seconds for w in windows) / steps if steps else None
    return LiveSide(side.label, side.script, side.script_args, side.revision, step_s, error)


def _notes(rounds: list[LiveRound], found: Interval) -> tuple[str, ...]:
    notes = []
    if len(rounds) < MIN_ROUNDS:
        notes.append(f"only {len(rounds)} round of fresh processes fitted in the budget: a process's own luck "
                     "(where its memory and threads landed) could not be measured, and may move the ratio")
    if found.process_sd > found.pair_sd / 2:
        notes.append(f"fresh processes differed by {found.process_sd:.1%} from round to round, beyond their "
                     "windows' spread: the interval counts it, so more rounds narrow it")
    if found.trim == 0 and found.pairs >= 8:
        notes.append("the pairs far from the rest lean to one side (one script is slow now and then: work done every "
                     "so many steps?): the plain mean of the pairs is used, not the trimmed one, so that cost counts")
    pinned = [r.pinned_cpu for r in rounds if r.pinned_cpu is not None]
    if pinned:
        notes.append(f"both sides computed on one thread with no worker processes: {len(pinned)} of {len(rounds)} "
                     f"round(s) pinned both to one CPU (CPU {', '.join(str(c) for c in sorted(set(pinned)))}), so "
                     "that a pair's two windows ran on the same core")
    ended = sorted({r.ended for r in rounds if r.ended != "stopped"})
    if ended:
        notes.append(f"a round ended before its pairs when a side's script ended ({', '.join(ended)}): give the "
                     "scripts more steps (epochs) to compare for longer")
    return tuple(notes)


class _Round:
    """One pair of fresh processes taking turns; each side's process runs in a thread of its own."""

    def __init__(self, number: int, order: tuple[SideToRun, SideToRun], root: Path, deadline: float,
                 turns_s: float, on_progress: Callable[[str], None], settled: Callable[[tuple[float, ...]], bool]):
        self.number, self.order, self.root = number, order, root
        self.deadline, self.turns_s, self.on_progress, self.settled = deadline, turns_s, on_progress, settled
        self.events: queue.Queue = queue.Queue()
        self.alive: dict[str, bool] = {}
        self.writers: dict[str, int] = {}
        self.folders: dict[str, Path] = {}
        self.errors: dict[str, str] = {}
        self.ready: dict[str, tuple[int, int, int]] = {}  # each side's process id, threads and child processes
        self.pinned_cpu: Optional[int] = None
        self.interrupted = False
        self.threads: list[threading.Thread] = []

    def run(self) -> LiveRound:
        started = time.monotonic()
        windows: list[LiveWindow] = []
        ended = "stopped"
        try:
            self._start()
            if self._wait_ready():
                windows, ended = self._take_turns()
        except KeyboardInterrupt:
            self.interrupted = True
        finally:
            self._stop()
        self._read_errors()
        return LiveRound(tuple(windows), pair_log_ratios(windows), time.monotonic() - started, ended, self.pinned_cpu)

    def _start(self) -> None:
        for side in self.order:
            folder = self.root / f"{self.number:02d}-{side.label}"
            folder.mkdir(parents=True, exist_ok=True)
            fifo = RunRecord(folder).files.turns_fifo
            os.mkfifo(fifo)
            config = RunConfig(script=side.script, script_args=side.script_args, out_dir=str(folder),
                               warmup_steps=0, profile_steps=0,
                               max_seconds=max(self.deadline - time.monotonic(), 1.0) + STOP_MARGIN_S,
                               measure=_plan(str(fifo)), environment=side.environment)
            self.folders[side.label] = folder
            self.alive[side.label] = True
            thread = threading.Thread(target=self._child, args=(side.label, config, folder), daemon=True)
            thread.start()
            self.threads.append(thread)

    def _child(self, label: str, config: RunConfig, folder: Path) -> None:
        try:
            run_in_child(config, folder, lambda line, is_err: None, lambda line: self.events.put((label, line)),
                         TIMED_ENTRY)
        finally:
            self.events.put((label, None))

    def _next_event(self, timeout_s: float) -> Optional[tuple[str, Optional[str]]]:
        try:
            label, line = self.events.get(timeout=max(timeout_s, 0.01))
        except queue.Empty:
            return None
        if line is None:
            self.alive[label] = False
        return label, line

    def _wait_ready(self) -> bool:
        waiting = {side.label for side in self.order}
        while waiting:
            event = self._next_event(self.deadline - time.monotonic())
            if event is None:
                return False  # the budget ran out while they warmed up
            label, line = event
            if line is None:
                return False  # a side ended before its first turn: its error is read from its folder
            ready = parse_ready_line(line)
            if ready is not None:
                waiting.discard(label)
                self.ready[label] = ready
        self.pinned_cpu = self._pin_if_single_threaded()
        self.on_progress(f"round {self.number}: taking turns")
        return True

    def _pin_if_single_threaded(self) -> Optional[int]:
        """Both sides compute on one thread, with no worker processes: both are pinned to one CPU, a different one
        each round. A pair's two windows then run on the same core, where on a VM two vCPUs' speeds differ from
        moment to moment: the pairs' spread fell from 12.7% to 9.5% (8 rounds each, interleaved). A side that
        uses more threads or processes is left free: pinned, it would lose the parallelism it is compared on."""
        if len(self.ready) < 2 or any(threads != 1 or children for _, threads, children in self.ready.values()):
            return None
        try:
            cpus = sorted(os.sched_getaffinity(0))
            cpu = cpus[(self.number - 1) % len(cpus)]
            for pid, _, _ in self.ready.values():
                for thread in psutil.Process(pid).threads():
                    os.sched_setaffinity(thread.id, {cpu})
        except (OSError, AttributeError, psutil.Error):  # no affinity here (macOS), or a side is gone
            return None
        return cpu

    def _take_turns(self) -> tuple[list[LiveWindow], str]:
        windows: list[LiveWindow] = []
        first, second = (s.label for s in self.order)
        turn, until = 0, min(time.monotonic() + self.turns_s, self.deadline - STOP_MARGIN_S)
        while time.monotonic() < until:
            label = (first, second, second, first)[turn % 4]
            window = self._turn(label)
            if window is None:
                return windows, self._ended_as(label)
            windows.append(window)
            turn += 1
            if turn % (2 * CHECK_EVERY_PAIRS) == 0:
                pairs = pair_log_ratios(windows)
                self.on_progress(f"round {self.number}: {len(pairs)} pairs")
                if self.settled(pairs):
                    break
        return windows, "stopped"

    def _turn(self, label: str) -> Optional[LiveWindow]:
        if not self._send(label, GO):
            return None
        while True:
            event = self._next_event(min(TURN_TIMEOUT_S, self.deadline - time.monotonic()))
            if event is None:
                return None
            side, line = event
            if side != label:
                continue
            if line is None:
                return None
            parsed = parse_window_line(line)
            if parsed is not None:
                return LiveWindow(label, *parsed)

    def _send(self, label: str, token: bytes) -> bool:
        fd = self.writers.get(label)
        if fd is None:
            fd = self._open_writer(label)
            if fd is None:
                return False
        try:
            os.write(fd, token)
            return True
        except OSError:  # the child is gone (EPIPE)
            return False

    def _open_writer(self, label: str) -> Optional[int]:
        """The pipe's writing end, once the child has opened its reading end (right after saying it is ready)."""
        fifo = RunRecord(self.folders[label]).files.turns_fifo
        while self.alive.get(label) and time.monotonic() < self.deadline:
            try:
                fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
                self.writers[label] = fd
                return fd
            except OSError as exc:
                if exc.errno != errno.ENXIO:  # ENXIO: no reader yet
                    return None
                time.sleep(0.01)
        return None

    def _ended_as(self, label: str) -> str:
        measurement = _measurement(self.folders[label])
        status = measurement.status if measurement is not None else "crashed"
        return f"{label} {status}"

    def _stop(self) -> None:
        for label in list(self.alive):
            if self.alive[label]:
                self._send(label, STOP)
        for label, folder in self.folders.items():
            if label in self.writers:
                os.close(self.writers.pop(label))  # a child still waiting reads the end of the pipe: it stops too
            elif self.alive.get(label):
                _release_reader(RunRecord(folder).files.turns_fifo)
        for thread in self.threads:
            thread.join(timeout=STOP_MARGIN_S + 60.0)

    def _read_errors(self) -> None:
        for label, folder in self.folders.items():
            measurement = _measurement(folder)
            failed = measurement is None or not Status.is_ok(measurement.status)
            if failed and (measurement is None or measurement.status != Status.INTERRUPTED):
                self.errors[label] = _error_text(label, measurement, folder)
            RunRecord(folder).files.turns_fifo.unlink(missing_ok=True)


def _plan(fifo: str) -> MeasurePlan:
    many = 10 ** 9  # the windows go on until the parent stops the run
    return MeasurePlan(warmup_steps=WARMUP_STEPS, warmup_s=WARMUP_S, window_s=WINDOW_S, min_window_steps=2,
                       max_window_steps=many, windows=many, min_windows=many, turns_fifo=fifo)


def _release_reader(fifo: Path) -> None:
    """A child that never got to open its pipe's writing end (it stopped before its first turn) may wait in
    open(): opening and closing the writing end lets it read the end of the pipe and stop."""
    try:
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
    except OSError:
        pass


def _measurement(folder: Path) -> Optional[Measurement]:
    try:
        return RunRecord(folder).measure()
    except Exception:  # a child killed while writing: its log says why
        return None


def _error_text(label: str, measurement: Optional[Measurement], folder: Path) -> str:
    if measurement is not None and measurement.error is not None:
        return f"{label}: {measurement.error.type}: {measurement.error.message}"
    if measurement is not None:
        return f"{label}: the script ended with status {measurement.status} before a timed window"
    record = RunRecord(folder)
    last = [line for line in record.script_log().splitlines() if line.strip()][-1:]
    return f"{label}: the process died ({last[0] if last else 'no output'}); see {record.files.script_log}"
