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
from functools import lru_cache
from typing import Optional

import numpy as np

from diagnose.lean_dataclass import dataclass
from diagnose.trace import BUILT_IN, FRAMEWORK, LIBRARY, USER, Spans, frame_pieces, nesting_parents, present_in_order
from diagnose.trace import intervals as iv

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
    # the locations as codes into a table, where the pieces were cut by array operations (None: walked)
    location_codes: Optional[np.ndarray] = None
    location_table: tuple[str, ...] = ()

    def __len__(self) -> int:
        return len(self.locations)

    def time_by_location(self, busy: np.ndarray) -> dict[tuple[str, bool], float]:
        """Microseconds of `busy` (disjoint intervals) spent under each (user location, in library), in order of
        first appearance."""
        if not len(self) or not len(busy):
            return {}
        covered = iv.measure_within(busy, self.intervals)
        if self.location_codes is None:
            return _summed_by_location(self.locations, self.in_library, covered)
        named = np.asarray([bool(location) for location in self.location_table], dtype=bool)
        keep = np.flatnonzero(named[self.location_codes] & (covered > 0))
        keys = self.location_codes[keep] * 2 + self.in_library[keep]  # (location, in library) as one code
        sums = np.bincount(keys, weights=covered[keep])  # added in the pieces' order, as the loop adds them
        return {(self.location_table[key // 2], bool(key % 2)): float(sums[key])
                for key in present_in_order(keys).tolist()}


def _summed_by_location(locations: tuple[str, ...], in_library: np.ndarray, covered: np.ndarray) -> dict:
    totals: dict[tuple[str, bool], float] = defaultdict(float)
    for location, lib, us in zip(locations, in_library.tolist(), covered.tolist()):
        if location and us > 0:
            totals[(location, bool(lib))] += us
    return dict(totals)


def innermost_segments(python: Spans, tid) -> FrameSegments:
    """The thread's time cut where its innermost frame changes, each piece given to the frame on top: by array
    operations where its frames nest (as a profiler's do), else by a walk with a stack."""
    idx = np.flatnonzero(python.thread_mask(lambda t: t == tid))
    if not len(idx):
        return FrameSegments(iv.EMPTY, (), np.zeros(0, dtype=bool))
    frames = python.take(idx[np.lexsort((-python.end[idx], python.start[idx]))])  # by start, outer frames first
    codes, names = frames.factorized()
    name_roles, name_locations = _frame_roles(names)
    walked = frame_pieces(frames.start, frames.end, name_roles[codes], codes)
    if walked is not None:  # a big trace: the walk compiled
        return _segments(*walked, name_locations) if len(walked[0]) else FrameSegments(iv.EMPTY, (), walked[2])
    ends, nested = _clipped_nesting(frames)
    return _walked_segments(frames) if nested is None else _nested_segments(frames, ends, *nested)


def _clipped_nesting(frames: Spans):
    """(each frame's end, clipped to its parent's as the walk clips it, and nesting_parents of the frames so
    clipped), or (None, None) where they do not nest. A frame outlives its parent in real traces by a nanosecond
    of rounding (2 of 24k frames in one)."""
    order, thread = np.arange(len(frames)), np.zeros(len(frames), dtype=np.int64)
    nested = nesting_parents(order, thread, frames.start, frames.end, outliving=True)
    if nested is None:
        return None, None
    depth, inner, parent_of_inner = nested
    parent = np.full(len(frames), -1, dtype=np.int64)
    parent[inner] = parent_of_inner
    ends = frames.end.copy()
    for level in _by_depth(depth)[1:]:
        ends[level] = np.minimum(ends[level], ends[parent[level]])
    if np.array_equal(ends, frames.end):  # none outlived its parent: the nesting is the one found
        return ends, nested
    return ends, nesting_parents(order, thread, frames.start, ends)


# what a frame's name makes of the time under it (BUILT_IN, USER, LIBRARY, FRAMEWORK): a built-in call's belongs to
# the frame that made it, the user's own function takes it, a library's stays with the user's function (torch's own
# counts as framework)


def _frame_roles(names: list[str]) -> tuple[np.ndarray, list[str]]:
    """Each distinct name's role, and its location where the role is USER ("" else)."""
    roles, locations = [], []
    for name in names:
        match = FRAME.match(name)
        if match is None:
            roles.append(BUILT_IN)
        elif not is_library_path(match["path"]):
            roles.append(USER)
        else:
            roles.append(FRAMEWORK if is_framework_path(match["path"]) else LIBRARY)
        locations.append(frame_location(name) if roles[-1] == USER else "")
    return np.asarray(roles, dtype=np.int64), locations


def _nested_segments(frames: Spans, ends: np.ndarray, depth: np.ndarray, inner: np.ndarray,
                     parent_of_inner: np.ndarray):
    """The walk's pieces where frames nest: each frame's (location, in library) passed down from its parent,
    level by level; then the frame on top between each two consecutive starts and ends."""
    codes, names = frames.factorized()
    name_roles, name_locations = _frame_roles(names)
    role, own = name_roles[codes], codes  # (own: the name's location, a code into name_locations)
    parent = np.full(len(frames), -1, dtype=np.int64)
    parent[inner] = parent_of_inner
    location = np.where(role == USER, own, -1)  # -1: no user frame around it ("")
    library = role == FRAMEWORK
    for level in _by_depth(depth)[1:]:
        above = parent[level]
        inherits = role[level] != USER
        location[level] = np.where(inherits, location[above], own[level])
        library[level] = inherits & (library[above] | (role[level] == FRAMEWORK))
    return _pieces_on_top(frames.start, ends, depth, parent, location, library, name_locations)


def _by_depth(depth: np.ndarray) -> list[np.ndarray]:
    """The positions at each depth, shallowest first."""
    order = np.argsort(depth, kind="stable")
    return np.split(order, np.flatnonzero(np.diff(depth[order])) + 1)


def _pieces_on_top(starts, ends, depth, parent, location, library, name_locations: list[str]) -> FrameSegments:
    """Starts and ends in time order (at one time, ends before starts, inner ends first and outer starts first, as
    the walk pops and pushes; an empty frame's end after its start); after a start its frame is on top, after an
    end its parent (-1: none)."""
    n = len(starts)
    times = np.concatenate([ends, starts])
    is_start = np.r_[np.zeros(n, dtype=bool), np.ones(n, dtype=bool)]
    frame = np.r_[np.arange(n), np.arange(n)]
    phase = np.where(is_start, 1, np.where(ends[frame] == starts[frame], 2, 0))
    within = np.where(is_start, frame, -depth[frame])  # starts in the walk's order; ends deepest first
    events = np.lexsort((within, phase, times))
    times, frame = times[events], frame[events]
    top = np.where(is_start[events], frame, parent[frame])
    keep = np.flatnonzero((np.diff(times) > 0) & (top[:-1] >= 0))
    if not len(keep):
        return FrameSegments(iv.EMPTY, (), np.zeros(0, dtype=bool))
    on_top = top[keep]
    return _segments(np.column_stack([times[keep], times[keep + 1]]), location[on_top], library[on_top],
                     name_locations)


def _segments(intervals: np.ndarray, location: np.ndarray, library: np.ndarray,
              name_locations: list[str]) -> FrameSegments:
    """The pieces with their locations as codes into a table of the names' locations and "" (for -1: none)."""
    table = (*name_locations, "")
    codes = np.where(location < 0, len(name_locations), location)
    texts = np.asarray(table, dtype=object)
    return FrameSegments(intervals, tuple(texts[codes].tolist()), library, codes, table)


def _walked_segments(frames: Spans) -> FrameSegments:
    """Sweep the frames (by start, outer first) once with a stack; each piece of time goes to the frame on top."""
    pieces: list[tuple[float, float, str, bool]] = []
    stack: list[tuple[float, str, bool]] = []  # (end, innermost user location so far, this frame is library)
    cursor = float(frames.start[0])

    def emit_until(t: float) -> None:
        nonlocal cursor
        if stack and t > cursor:
            _, location, lib = stack[-1]
            pieces.append((cursor, t, location, lib))
        cursor = max(cursor, t)

    for start, end, name in zip(frames.start.tolist(), frames.end.tolist(), frames.names):
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
