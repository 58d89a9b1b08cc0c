"""The profiled window, one for `diagnose run`'s child (capture/session.py) and `diagnose.window(...)` (api/window.py):
torch.profiler over chosen steps of a loop that goes on, each step a ProfilerStep#N span, the device synchronised at the
window's two edges, the trace written by TensorBoard's handler as <trace_dir>/<worker_name>.<...>.pt.trace.json."""
from __future__ import annotations

import time
from pathlib import Path
from typing import Optional

import torch

from diagnose.capture.device import device_in_use, sync_device

CLOCK_SYNC = "diagnose::clock_sync"  # the trace event whose start is `sync_mark_ns` on the host's monotonic clock


def activities() -> list:
    """The host always; the GPU when the script has used CUDA. A script that has not touched CUDA by the window has no
    kernels in it, and CUPTI's start-up would cost it time (and may make a context on a device it never chose)."""
    chosen = [torch.profiler.ProfilerActivity.CPU]
    if device_in_use():
        chosen.append(torch.profiler.ProfilerActivity.CUDA)
    return chosen


class ProfiledWindow:
    """One window: start() at a step boundary, mark_step(N) at the start of each profiled step (the first included),
    stop() after the last, which writes the trace. `started_at` and `ended_at` (time.monotonic()) are the window's
    edges with the device idle at both: CUDA is asynchronous, so without a sync the window would begin with earlier
    steps' kernels queued and end before its own ran."""

    def __init__(self, trace_dir: Path, worker_name: str, with_stack: bool = False):
        # with_stack is off by default: its Python tracer slows every Python call (2x on a small model's step) and so
        # inflates exactly the host overhead being measured; diagnose run's stack sampler finds the lines instead
        self.profiler = torch.profiler.profile(
            activities=activities(), record_shapes=True, profile_memory=True, with_stack=with_stack,
            on_trace_ready=torch.profiler.tensorboard_trace_handler(str(trace_dir), worker_name=worker_name))
        self.step_span: Optional[torch.profiler.record_function] = None  # the open ProfilerStep#N span
        self.sync_mark_ns: Optional[int] = None
        self.started_at: Optional[float] = None
        self.ended_at: Optional[float] = None

    def start(self) -> None:
        """Start profiling with the device idle (no earlier step's kernels in the window); a profiler that fails to
        start raises to the caller."""
        sync_device()
        self.profiler.start()
        for _ in range(2):  # the first record_function after start is slow; the second one is the mark
            self.sync_mark_ns = time.monotonic_ns()
            with torch.profiler.record_function(CLOCK_SYNC):
                pass
        self.started_at = time.monotonic()

    def mark_step(self, step: int) -> None:
        """Close the previous ProfilerStep span and open the next, as profiler.step() does under a schedule (the
        analysis cuts steps at them)."""
        self._close_step()
        self.step_span = torch.profiler.record_function(f"ProfilerStep#{step}")
        self.step_span.__enter__()

    def stop(self) -> None:
        """End the last step, wait for its device work (so that it is in the trace), and write the trace. The sync
        comes after the last span is closed: its wait is diagnose's, not a step's (in a step it would read as the
        script synchronising)."""
        self._close_step()
        sync_device()
        self.ended_at = time.monotonic()
        profiler, self.profiler = self.profiler, None  # its event buffers are freed once the trace is written
        profiler.stop()

    def _close_step(self) -> None:
        if self.step_span is not None:
            self.step_span.__exit__(None, None, None)
            self.step_span = None
