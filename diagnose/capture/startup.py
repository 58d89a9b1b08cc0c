"""What the script does before its first step: compiling, loading weights, preparing data, importing, starting
the process group, initialising the model's weights, its own code, the first step. A thread samples the main
thread's stack until the first step boundary, shows what it sees in the progress line every few seconds, and
hands the split to the capture (Startup)."""
from __future__ import annotations

import sys
import threading
import time
from collections import Counter
from types import FrameType
from typing import Callable, Optional

from diagnose.capture.sites import user_location
from diagnose.formatting import FIRST_STEP, OWN_CODE, startup_place
from diagnose.model import Startup

# (activity, module-name prefixes, what to call the place), by the __name__ of each frame's module on the stack:
# importing first (importing transformers runs torch.distributed's module code), then compiling, then (once the
# model's first forward has run) the first step; running compiled code is not compiling (eval_frame, the runtime
# wrappers are on every compiled call's stack)
IMPORTING = ("importing", ("importlib._bootstrap",), "imports")
COMPILING = ("compiling", ("torch._inductor", "torch._dynamo", "torch._functorch", "triton"), "torch.compile")
NOT_COMPILING = ("torch._dynamo.eval_frame", "torch._dynamo.external_utils", "torch._functorch._aot_autograd.runtime",
                 "torch._inductor.output_code", "torch._inductor.utils")
BEFORE_TRAINING = (
    ("loading weights", ("transformers.modeling_utils", "huggingface_hub", "safetensors", "torch.serialization"),
     "weights"),
    ("preparing data", ("datasets", "tokenizers", "transformers.tokenization"), "data"),
    ("distributed start-up", ("torch.distributed",), "torch.distributed"),
    ("building the model", ("torch.nn.init",), "torch.nn.init"),
)


def classify(frame: Optional[FrameType], training_started: bool) -> tuple[str, str]:
    """(activity, place) of a main-thread stack: place is the package at work, or the user's file:line."""
    modules = []
    innermost = frame
    while frame is not None:
        modules.append(frame.f_globals.get("__name__") or "")
        frame = frame.f_back
    found = _first(modules, IMPORTING[1]) or _compiling(modules)
    if found:
        return (IMPORTING[0], "imports") if found.startswith("importlib") else (COMPILING[0], _package(found))
    if training_started:
        return FIRST_STEP, user_location(innermost) or "?"
    for activity, prefixes, _ in BEFORE_TRAINING:
        found = _first(modules, prefixes)
        if found:
            return activity, _package(found)
    return OWN_CODE, user_location(innermost) or "?"


def _first(modules: list[str], prefixes: tuple[str, ...]) -> Optional[str]:
    return next((m for m in modules if m.startswith(prefixes)), None)


def _compiling(modules: list[str]) -> Optional[str]:
    return next((m for m in modules if m.startswith(COMPILING[1]) and not m.startswith(NOT_COMPILING)), None)


def _package(module: str) -> str:
    """'torch._inductor.codecache' -> 'torch/_inductor'; 'transformers.modeling_utils' -> 'transformers'."""
    parts = module.split(".")
    return "/".join(parts[:2]) if parts[0] == "torch" else parts[0]


class StartupWatch(threading.Thread):
    INTERVAL_S = 0.1
    SAY_EVERY_S = 2.0

    def __init__(self, main_thread_id: int, t0: float, progress: Callable[[str], None],
                 training_started: Callable[[], bool]):
        super().__init__(name="diagnose-startup-watch", daemon=True)
        self.main_thread_id, self.t0, self.progress = main_thread_id, t0, progress
        self.training_started = training_started
        self.stop_event = threading.Event()
        self.samples: Counter[tuple[str, str]] = Counter()
        self.last: tuple[str, str] = ("", "")
        self.lock = threading.Lock()  # finish() may read while a late sample lands

    def run(self) -> None:
        said = time.monotonic()
        while not self.stop_event.wait(self.INTERVAL_S):
            frame = sys._current_frames().get(self.main_thread_id)
            seen = classify(frame, self.training_started())
            del frame
            if seen[1] == "?":  # no user frame: the script has ended, or is not yet running
                continue
            with self.lock:
                self.samples[seen] += 1
                self.last = seen
            if time.monotonic() - said >= self.SAY_EVERY_S:
                said = time.monotonic()
                self.progress(waiting_line(said - self.t0, *seen))

    def finish(self, first_step_s: Optional[float], stopped_at_limit: bool) -> Startup:
        """The split so far; `first_step_s`: when the first step boundary came (None: it never did)."""
        self.stop_event.set()
        if self.is_alive():
            self.join(timeout=1)
        with self.lock:
            samples, last = dict(self.samples), self.last
        total = sum(samples.values()) or 1
        seconds = first_step_s if first_step_s is not None else time.monotonic() - self.t0
        by_activity: Counter[str] = Counter()
        places: dict[str, Counter[str]] = {}
        for (activity, place), n in samples.items():
            by_activity[activity] += n
            places.setdefault(activity, Counter())[place] += n
        return Startup(
            seconds=seconds,
            by_activity={a: seconds * n / total for a, n in by_activity.most_common()},
            places={a: c.most_common(1)[0][0] for a, c in places.items()},
            last_activity=last[0], last_place=last[1], reached_step=first_step_s is not None,
            stopped_at_limit=stopped_at_limit)


def waiting_line(elapsed_s: float, activity: str, place: str) -> str:
    """'waiting for the first step: 41 s, in torch/_inductor (compiling)'."""
    return f"waiting for the first step: {elapsed_s:.0f} s, {startup_place(activity, place)}"
