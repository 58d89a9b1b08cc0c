"""The sweep of one thread's Python frames (frames._walked_segments) compiled, for a big trace whose kernels are
loaded: its pieces of time and the frame on top in each, as arrays. The roles say what a frame makes of the time
under it (analysis/frames.py decides them from the frame's name)."""
from __future__ import annotations

from typing import Optional

import numpy as np

from diagnose.trace import jitscan
from diagnose.trace.nesting import BUILT_IN, FRAMEWORK, LIBRARY, USER

__all__ = ["BUILT_IN", "USER", "LIBRARY", "FRAMEWORK", "frame_pieces"]


def frame_pieces(starts: np.ndarray, ends: np.ndarray, role: np.ndarray,
                 own: np.ndarray) -> Optional[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """(pieces' (start, end), the location code on top in each (-1: no user frame), whether in torch's own Python)
    of frames by start, the outer first (own: each frame's location code, read where its role is USER); None
    where no kernels are loaded (a small trace: the arrays' form or the Python walk cuts them)."""
    kernels = jitscan.for_size(len(starts))
    if kernels is None:
        return None
    n = len(starts)
    stack_end, stack_location = np.empty(n, dtype=np.float64), np.empty(n, dtype=np.int64)
    stack_library = np.empty(n, dtype=np.bool_)
    times = np.empty((2 * n + 1, 2), dtype=np.float64)
    location, library = np.empty(2 * n + 1, dtype=np.int64), np.empty(2 * n + 1, dtype=np.bool_)
    count = kernels.walk_frames(np.ascontiguousarray(starts, dtype=np.float64),
                                np.ascontiguousarray(ends, dtype=np.float64), role.astype(np.int64),
                                own.astype(np.int64), stack_end, stack_location, stack_library, times, location,
                                library)
    return times[:count].copy(), location[:count].copy(), library[:count].copy()
