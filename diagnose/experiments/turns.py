"""The child's side of an interleaved comparison (`diagnose compare --live`, `run --baseline-ref`): two timed runs,
A and B, live side by side, and only one runs at a time. Each times one window, hands the turn back and waits,
its own loader workers frozen, until the parent gives it the next one.

Turns, not whole processes, alternate: a shared machine's speed drifts over seconds (a 2-core VM's matrix products
switch between speeds 20% apart), so windows a second apart see the same machine where runs a minute apart do not.

The parent writes one byte per turn into a named pipe (GO or STOP); the child says it is ready and reports each
window on its progress channel (the lines below). While it waits, its child processes (DataLoader workers,
compile workers) are stopped with SIGSTOP: a waiting run that kept prefetching would start its next window with a
full buffer and time a burst, not its steady rate."""
from __future__ import annotations

import os
import signal
from typing import Callable, Optional

import psutil

GO, STOP = b"g", b"s"
READY_PREFIX = "turn ready"  # "turn ready PID THREADS CHILDREN": warm, waiting for its first turn; its process id,
# torch's intra-op threads and its child processes (loader workers): whether it computes on one CPU alone
WINDOW_PREFIX = "turn window"  # "turn window STEPS SECONDS SAMPLES": the window it just timed (SAMPLES: - unknown)


def window_line(steps: int, seconds: float, samples: Optional[int]) -> str:
    return f"{WINDOW_PREFIX} {steps} {seconds!r} {'-' if samples is None else samples}"


def ready_line(pid: int, threads: int, children: int) -> str:
    return f"{READY_PREFIX} {pid} {threads} {children}"


def parse_ready_line(line: str) -> Optional[tuple[int, int, int]]:
    """(pid, threads, children) from a ready line; None for any other progress line."""
    if not line.startswith(READY_PREFIX + " "):
        return None
    pid, threads, children = line[len(READY_PREFIX) + 1:].split()
    return int(pid), int(threads), int(children)


def parse_window_line(line: str) -> Optional[tuple[int, float, Optional[int]]]:
    """(steps, seconds, samples) from a window line; None for any other progress line."""
    if not line.startswith(WINDOW_PREFIX + " "):
        return None
    steps, seconds, samples = line[len(WINDOW_PREFIX) + 1:].split()
    return int(steps), float(seconds), None if samples == "-" else int(samples)


class TurnTaker:
    """Waits at a step boundary for the parent's next turn (`wait` is True) or its stop (False)."""

    def __init__(self, fifo_path: str, progress: Callable[[str], None]):
        self.fifo_path, self.progress = fifo_path, progress
        self.fd: Optional[int] = None

    def ready(self) -> bool:
        import torch

        try:
            children = len(psutil.Process().children(recursive=True))
        except psutil.Error:
            children = 0
        self.progress(ready_line(os.getpid(), torch.get_num_threads(), children))
        return self._wait()

    def hand_back(self, steps: int, seconds: float, samples: Optional[int]) -> bool:
        self.progress(window_line(steps, seconds, samples))
        return self._wait()

    def _wait(self) -> bool:
        frozen = _freeze_children()
        try:
            if self.fd is None:
                self.fd = os.open(self.fifo_path, os.O_RDONLY)  # blocks until the parent opens it to write
            token = os.read(self.fd, 1)
        finally:
            _thaw(frozen)
        return token == GO  # STOP, or an empty read: the parent closed the pipe (it stopped or died)


def _freeze_children() -> list[psutil.Process]:
    frozen = []
    try:
        children = psutil.Process().children(recursive=True)
    except psutil.Error:
        return frozen
    for child in children:
        try:
            child.send_signal(signal.SIGSTOP)
            frozen.append(child)
        except psutil.Error:  # gone already
            pass
    return frozen


def _thaw(frozen: list[psutil.Process]) -> None:
    for child in frozen:
        try:
            child.send_signal(signal.SIGCONT)
        except psutil.Error:
            pass
