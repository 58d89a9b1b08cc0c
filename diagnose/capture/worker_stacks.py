"""What a DataLoader's worker processes were doing when a step hung.

Workers are processes of their own: no thread of the main process can see their frames. Each worker registers
faulthandler on DUMP_SIGNAL when it starts (a wrapper around the loader's worker_init_fn, picklable so that spawned
workers get it too), writing into a file of its own; at a hang the main process signals each live worker and reads
what it wrote. faulthandler writes from its C signal handler, so a worker stuck in a lock or in native code still
answers."""
from __future__ import annotations

import faulthandler
import os
import re
import signal
import time
from pathlib import Path
from typing import Callable, Iterable, Optional

from diagnose.capture import hang
from diagnose.capture.sites import is_user_file
from diagnose.model import without_comment

DUMP_SIGNAL = signal.SIGUSR2
DUMP_WAIT_S = 1.0  # how long a worker may take to write its stacks
FRAME = re.compile(r'^\s+File "(.*)", line (\d+) in (.*)$')
THREAD = re.compile(r"^(Current thread|Thread) 0x[0-9a-f]+")
IDLE = "idle: waiting for the next index from the main process"

_kept_open: list = []  # in the worker: the file faulthandler writes to must stay open


class DumpStacksOnSignal:
    """A loader's worker_init_fn that first arms the stack dump, then runs the user's own (if any)."""

    def __init__(self, folder: str, user_init: Optional[Callable[[int], None]]):
        self.folder, self.user_init = folder, user_init

    def __call__(self, worker_id: int) -> None:
        if signal.getsignal(DUMP_SIGNAL) == signal.SIG_DFL:  # the script's own handler stays
            stream = open(os.path.join(self.folder, f"{os.getpid()}.txt"), "w")
            _kept_open.append(stream)
            faulthandler.register(DUMP_SIGNAL, file=stream, all_threads=True)
        if self.user_init is not None:
            self.user_init(worker_id)


def watch(loader, folder: Path) -> None:
    """Arm the stack dump in the loader's workers (a loader without workers has none to watch)."""
    if getattr(loader, "num_workers", 0) and not isinstance(loader.worker_init_fn, DumpStacksOnSignal):
        loader.worker_init_fn = DumpStacksOnSignal(str(folder), loader.worker_init_fn)


def worker_stacks(iterators: Iterable, folder: Path) -> tuple[str, ...]:
    """One line per worker of the live iterators: where it was ("worker 0 (pid N): file:line in fn: code,
    waiting on a lock"), that it had exited, or that it could not be asked."""
    workers = [(n, w) for it in iterators for n, w in enumerate(getattr(it, "_workers", None) or [])]
    asked = {}
    for n, worker in workers:
        path = folder / f"{worker.pid}.txt"
        if worker.is_alive() and path.exists():
            os.kill(worker.pid, DUMP_SIGNAL)
            asked[worker.pid] = path
    _wait_for_dumps(asked.values())
    lines = []
    for n, worker in workers:
        lines.append(f"worker {n} (pid {worker.pid}): " + _worker_state(worker, asked.get(worker.pid)))
    return tuple(lines)


def _wait_for_dumps(paths: Iterable[Path]) -> None:
    """Until each file has stopped growing (faulthandler writes a dump in one go), a second at most."""
    deadline = time.monotonic() + DUMP_WAIT_S
    sizes = {p: -1 for p in paths}
    while sizes and time.monotonic() < deadline:
        time.sleep(0.05)
        now = {p: p.stat().st_size for p in sizes}
        sizes = {p: size for p, size in now.items() if not size or size != sizes[p]}


def _worker_state(worker, dump: Optional[Path]) -> str:
    if not worker.is_alive():
        return f"exited (code {worker.exitcode})"
    if dump is None:
        return "its stack could not be read (the script handles SIGUSR2 itself, or it started before diagnose)"
    frames = main_frames(dump.read_text(errors="replace"))
    if not frames:
        return "it did not answer within a second"
    loops = [i for i, (file, _, function) in enumerate(frames) if function == "_worker_loop"]
    inner = frames[loops[-1] + 1:] if loops else frames  # a forked worker's stack holds its parent's frames too
    parsed = [(f, line, fn, without_comment(hang.code_at(f, line))) for f, line, fn in inner]
    user = next((p for p in reversed(parsed) if is_user_file(p[0])), None)
    if user is None and (not parsed or hang.waiting_on(parsed).startswith("a queue")):
        return IDLE
    user = user or parsed[-1]
    return f"{user[0]}:{user[1]} in {user[2]}: {user[3]}, waiting on {hang.waiting_on(parsed)}"


def main_frames(text: str) -> list[tuple[str, int, str]]:
    """The frames of the thread that was current (the worker's main thread, which took the signal), outermost
    first, from faulthandler's text (innermost first)."""
    blocks, current = [], None
    for line in text.splitlines():
        if THREAD.match(line):
            current = []
            blocks.append((line.startswith("Current"), current))
        elif (m := FRAME.match(line)) and current is not None:
            current.append((m.group(1), int(m.group(2)), m.group(3)))
    chosen = next((frames for is_current, frames in blocks if is_current), blocks[0][1] if blocks else [])
    return list(reversed(chosen))
