"""The user's code behind host time, read from the Python frames of a with_stack trace (python_function events).

`diagnose run` samples stacks itself; a trace people already have carries, when it was recorded with
with_stack=True, a span per Python call instead. Each name reads `path(line): function`, where the line is the
function's first line (or, for frames already running when profiling began, their line at that moment): the
attribution is per function, which is what the frames can honestly say."""
from __future__ import annotations

import os
import re
import site
import sys
import sysconfig
from collections import defaultdict
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

import diagnose.analysis.intervals as iv
from diagnose.analysis.spans import Spans

FRAME = re.compile(r"^(?P<path>[^()]+\.py)\((?P<line>\d+)\): (?P<function>.*)$")
LIBRARY_MARKERS = ("site-packages/", "dist-packages/", "/lib/python3", "/torch/")
# The profiler writes paths relative to the sys.path entry they were found under ("torch/optim/adam.py",
# "pathlib.py"), so a library is also known by its top-level package. These are the ones training code runs
# through; others are recognised when this interpreter has them installed too.
LIBRARY_PACKAGES = frozenset({
    "torch", "torchvision", "torchaudio", "torchtext", "torchdata", "functorch", "triton", "diagnose", "numpy",
    "PIL", "psutil", "tqdm", "transformers", "accelerate", "lightning", "pytorch_lightning", "lightning_fabric",
    "timm", "datasets", "deepspeed", "apex", "fairscale", "einops", "safetensors", "huggingface_hub",
    "tokenizers", "pyarrow", "pandas", "scipy", "sklearn", "hydra", "omegaconf", "wandb", "tensorboard", "fsspec",
    "webdataset", "albumentations", "cv2", "h5py", "sympy", "typing_extensions", "jinja2"})


@lru_cache(maxsize=None)
def is_library_path(path: str) -> bool:
    if any(marker in path for marker in LIBRARY_MARKERS):
        return True
    if os.path.isabs(path):
        return False
    top = path.split("/", 1)[0].removesuffix(".py")
    if top in LIBRARY_PACKAGES:
        return True
    roots = [sysconfig.get_paths()["stdlib"], *site.getsitepackages()]
    return top in sys.stdlib_module_names and any(os.path.exists(os.path.join(r, path)) for r in roots) or \
        any(os.path.exists(os.path.join(r, path)) for r in roots[1:])


def is_framework_path(path: str) -> bool:
    """torch's own machinery (and diagnose's hooks): Python time there is framework overhead, as the stack
    sampler counts it; time in other libraries (logging, wandb, pandas) is the work of the user's line."""
    return path.startswith(("torch/", "diagnose/")) or "/torch/" in path or "/diagnose/" in path


def is_user_frame(name: str) -> bool:
    match = FRAME.match(name)
    return bool(match) and not is_library_path(match["path"])


def frame_location(name: str) -> str:
    match = FRAME.match(name)
    return f"{match['path']}:{match['line']}" if match else ""


@dataclass(frozen=True)
class FrameSegments:
    """The main thread's time cut where its innermost Python frame changes: for each piece, the innermost frame
    of the user's own code around it, and whether it runs inside torch's own Python (framework overhead)."""
    intervals: np.ndarray  # (N, 2) us, disjoint, sorted
    locations: tuple[str, ...]  # path:line of the innermost user frame ("" when none)
    in_library: np.ndarray  # bool

    def __len__(self) -> int:
        return len(self.locations)

    def time_by_location(self, busy: np.ndarray) -> dict[tuple[str, bool], float]:
        """Microseconds of `busy` (disjoint intervals) spent under each (user location, in library)."""
        if not len(self) or not len(busy):
            return {}
        covered = iv.measure_within(busy, self.intervals)
        totals: dict[tuple[str, bool], float] = defaultdict(float)
        for location, lib, us in zip(self.locations, self.in_library.tolist(), covered.tolist()):
            if location and us > 0:
                totals[(location, bool(lib))] += us
        return dict(totals)


def innermost_segments(python: Spans, tid) -> FrameSegments:
    """Sweep the thread's nested frame spans once with a stack; each piece of time goes to the frame on top."""
    idx = np.flatnonzero(python.thread_mask(lambda t: t == tid))
    if not len(idx):
        return FrameSegments(iv.EMPTY, (), np.zeros(0, dtype=bool))
    idx = idx[np.lexsort((-python.end[idx], python.start[idx]))]  # by start, outer frames first
    pieces: list[tuple[float, float, str, bool]] = []
    stack: list[tuple[float, str, bool]] = []  # (end, innermost user location so far, this frame is library)
    cursor = float(python.start[idx[0]])

    def emit_until(t: float) -> None:
        nonlocal cursor
        if stack and t > cursor:
            _, location, lib = stack[-1]
            pieces.append((cursor, t, location, lib))
        cursor = max(cursor, t)

    for i, name in zip(idx.tolist(), python.take(idx).names):
        start, end = float(python.start[i]), float(python.end[i])
        while stack and stack[-1][0] <= start:
            emit_until(stack[-1][0])
            stack.pop()
        emit_until(start)
        outer_location, outer_lib = (stack[-1][1], stack[-1][2]) if stack else ("", False)
        if FRAME.match(name) is None:  # a built-in call: its time belongs to the frame that made it
            location, lib = outer_location, outer_lib
        elif is_user_frame(name):
            location, lib = frame_location(name), False
        else:  # a library frame: the time stays with the user's function; torch's own counts as framework
            location, lib = outer_location, outer_lib or is_framework_path(FRAME.match(name)["path"])
        stack.append((min(end, stack[-1][0]) if stack else end, location, lib))
    while stack:
        emit_until(stack[-1][0])
        stack.pop()
    if not pieces:
        return FrameSegments(iv.EMPTY, (), np.zeros(0, dtype=bool))
    starts, ends, locations, libs = zip(*pieces)
    return FrameSegments(np.column_stack([starts, ends]), tuple(locations), np.asarray(libs, dtype=bool))
