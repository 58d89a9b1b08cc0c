"""A step that never ends: where the script waits when the deadline comes.

The deadline's signal interrupts the main thread where it waits (a lock, a queue, a sleep, a socket read: Python's
waits return to the interpreter for signal handlers), and the handler sees its frame. A wait in native code (a gloo
or NCCL collective, a CUDA sync, a C++ future) never returns for the handler: a watchdog thread reads the main
thread's frame from sys._current_frames() instead (such waits release the GIL). Every other thread's stack comes
from sys._current_frames() at the same moment. Whether it hung, not merely ran slow steps, is decided by the
open step's age against the steps before it (`is_hang`)."""
from __future__ import annotations

import linecache
import os
import sys
import threading
from types import FrameType
from typing import Optional

from diagnose.capture.sites import is_user_file
from diagnose.model import Hang
from diagnose.resources import PACKAGE_DIR

HANG_FACTOR = 20  # an open step this many times the typical step...
HANG_MIN_S = 5.0  # ...and at least this long has hung, not run slow
STACK_DEPTH = 12  # frames kept of each stack, innermost last
INNER_FRAMES = 6  # the innermost frames that say what the wait is
DIAGNOSE_DIR = str(PACKAGE_DIR) + os.sep
OWN_THREADS = ("diagnose-",)  # diagnose's samplers and its deadline's timer

# what a wait is, from the innermost frames' files, functions and code: (what, a test on (file, function, code))
WAITS = (
    ("a collective (torch.distributed): another rank has not joined it",
     lambda f, fn, code: "torch/distributed" in f),
    ("a CUDA synchronisation (a kernel that does not finish: often a collective whose peer never joined)",
     lambda f, fn, code: "torch/cuda" in f and "synchronize" in fn or ".synchronize(" in code),
    ("a torch future (torch.futures / an asynchronous op's wait)",
     lambda f, fn, code: "torch/futures" in f or code.endswith(".wait()")),
    ("a DataLoader worker's batch", lambda f, fn, code: "torch/utils/data" in f and "_get_data" in fn),
    ("a queue (queue.Queue.get/put)",
     lambda f, fn, code: f.endswith(("queue.py", "queues.py")) or ".get(" in code and "queue" in code),
    ("a lock (threading.Lock.acquire or `with lock:`)",
     lambda f, fn, code: "acquire(" in code or code.startswith("with ") and "lock" in code.lower()),
    ("a thread or event (threading wait or join)",
     lambda f, fn, code: f.endswith("threading.py") and fn in ("wait", "join", "_wait_for_tstate_lock")),
    ("a sleep", lambda f, fn, code: "sleep(" in code),
    ("I/O (a socket, a pipe, a subprocess)",
     lambda f, fn, code: f.endswith(("socket.py", "selectors.py", "subprocess.py", "ssl.py"))),
)


UNKNOWN_WAIT = "something the stack below shows"
NATIVE_WAIT = ("native code that never returned to Python (a C/C++ call: a future, a device sync, a library's own "
               "lock)")


def is_hang(open_s: float, typical_step_s: Optional[float]) -> bool:
    """The step open when the deadline came has lasted HANG_FACTOR typical steps, and HANG_MIN_S at least."""
    if open_s < HANG_MIN_S:
        return False
    return typical_step_s is None or open_s >= HANG_FACTOR * typical_step_s


def snapshot(frame: Optional[FrameType]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The main thread's stack from `frame` (the signal handler's), and each other thread's innermost lines
    (the script's threads: not diagnose's samplers and timers)."""
    main = threading.main_thread().ident
    names = {t.ident: t.name for t in threading.enumerate()}
    others = []
    for ident, top in sys._current_frames().items():
        if ident in (main, threading.get_ident()) or str(names.get(ident, "")).startswith(OWN_THREADS):
            continue
        stack = stack_lines(top)
        others.append(f"{names.get(ident, ident)}: {stack[-1] if stack else '?'}")
    return stack_lines(frame), tuple(others)


def in_diagnose(frame: FrameType) -> bool:
    """The innermost frame is diagnose's own code (writing a trace, say): the main thread is not waiting."""
    return frame.f_code.co_filename.startswith(DIAGNOSE_DIR)


def code_at(filename: str, line: int) -> str:
    return linecache.getline(filename, line).strip()


def stack_lines(frame: Optional[FrameType]) -> tuple[str, ...]:
    """'file:line in function: code' for each frame, outermost first, the last STACK_DEPTH; diagnose's own frames
    and runpy's, which run the script, are left out."""
    lines = []
    while frame is not None:
        code = frame.f_code
        if code.co_filename.startswith((DIAGNOSE_DIR, "<frozen runpy>")):
            frame = frame.f_back
            continue
        where = f"{code.co_filename}:{frame.f_lineno}"
        lines.append(f"{where} in {code.co_name}: {code_at(code.co_filename, frame.f_lineno)}")
        frame = frame.f_back
    return tuple(reversed(lines[:STACK_DEPTH]))


def describe(stack: tuple[str, ...], step: int, open_s: float, typical_step_s: Optional[float],
             threads: tuple[str, ...], native: bool = False, workers: tuple[str, ...] = ()) -> Hang:
    """The hang as capture.json keeps it: the user's innermost line, its function, and what it waits on."""
    frames = [_parse(line) for line in stack]
    user = next((f for f in reversed(frames) if is_user_file(f[0])), None)
    what = waiting_on(frames)
    if native:
        what = NATIVE_WAIT if what == UNKNOWN_WAIT else f"{what}, in native code"
    return Hang(step=step, open_s=open_s, typical_step_s=typical_step_s,
                location=f"{user[0]}:{user[1]}" if user else None, function=user[2] if user else "",
                code=user[3] if user else "", waiting_on=what, stack=stack, threads=threads, native_wait=native,
                workers=workers)


def waiting_on(frames: list[tuple[str, int, str, str]]) -> str:
    """What the innermost frames (outside diagnose) wait on: the first of WAITS, in its order, that one of them
    fits (a DataLoader's wait is a socket's select deeper down: the DataLoader names it)."""
    inner = [f for f in frames if not f[0].startswith(DIAGNOSE_DIR)][-INNER_FRAMES:]
    for what, test in WAITS:
        if any(test(file, function, code) for file, _, function, code in inner):
            return what
    return UNKNOWN_WAIT


def _parse(line: str) -> tuple[str, int, str, str]:
    where, _, rest = line.partition(" in ")
    file, _, number = where.rpartition(":")
    function, _, code = rest.partition(": ")
    return file, int(number) if number.isdigit() else 0, function, code
