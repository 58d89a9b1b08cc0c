"""A timed run for an experiment: the script with one set of changes, no profiler. Warms up past worker
start-up, prefetch buffers and compilation, then times windows of steps (throughput = steps / wall time,
not a median step: steps with workers are bursty). Records the loss passed to backward() without a sync."""
from __future__ import annotations

import random
import time
from typing import Any, Optional

import torch

from diagnose.capture.host import ScriptHost
from diagnose.capture.gpu import peak_memory
from diagnose.capture.instrument import Instrumentation
from diagnose.capture.probe import peak_rss_bytes
from diagnose.model import Measurement, ScriptError, Window
from diagnose.optimizations.runtime import build_change_set
from diagnose.serial import write_json

MAX_LOSSES = 20_000


def batch_samples(batch: Any) -> Optional[int]:
    """Samples in a batch: the first dimension of its first tensor."""
    if isinstance(batch, torch.Tensor):
        return int(batch.shape[0]) if batch.dim() else None
    if isinstance(batch, dict):
        batch = list(batch.values())
    if isinstance(batch, (list, tuple)):
        for item in batch:
            found = batch_samples(item)
            if found is not None:
                return found
    return None


class MeasureSession(ScriptHost):
    def __init__(self, config, run_dir, progress):
        self.plan = config.measure
        changes = build_change_set(list(self.plan.changes), self.plan.train_loader_location)
        instr = Instrumentation(self.boundary, changes, on_batch=self.on_batch, on_loss=self.on_loss,
                                on_epoch=self.on_epoch)
        super().__init__(config, run_dir, progress, instr)
        self.boundaries: list[float] = []
        self.window_start: Optional[tuple[int, float, int]] = None  # (boundary count, time, samples so far)
        self.windows: list[Window] = []
        self.samples = 0
        self.samples_known = True
        self.losses: list[torch.Tensor] = []
        self.epoch_started = False  # the next step begins a new epoch (worker start-up, sampler reset)
        self.restart_step = False
        self.restart_steps: list[float] = []
        self.step_durations: list[float] = []
        self.steps_per_epoch: Optional[int] = None
        self._seed()

    def _seed(self) -> None:
        random.seed(self.plan.seed)
        torch.manual_seed(self.plan.seed)
        try:
            import numpy

            numpy.random.seed(self.plan.seed)
        except ImportError:
            pass

    last_samples = 0

    def on_batch(self, batch: Any) -> None:
        n = batch_samples(batch)
        self.last_samples = n or 0
        if n is None:
            self.samples_known = False
        else:
            self.samples += n

    def on_loss(self, loss: torch.Tensor) -> None:
        if len(self.losses) < MAX_LOSSES:
            self.losses.append(loss.detach().reshape(()))  # kept on its device: no sync per step

    def on_epoch(self, iterator: Any) -> None:
        self.epoch_started = True
        try:
            self.steps_per_epoch = len(iterator)
        except TypeError:
            pass

    def on_boundary(self, count: int) -> None:
        now = time.monotonic()
        self.boundaries.append(now)
        self._classify_last_step()
        plan = self.plan
        if self.window_start is None:
            warmed = count - 1 >= plan.warmup_steps and now - self.boundaries[0] >= plan.warmup_s
            if warmed:
                self.window_start = (count, now, self.samples)
                self.wall_start = (count, now)
                self.progress("measuring")
            return
        start_count, start_t, start_samples = self.window_start
        if self.restart_step:  # keep an epoch's start-up out of the window: it is amortised over the epoch later
            duration = self.boundaries[-1] - self.boundaries[-2]
            start_count, start_t, start_samples = start_count + 1, start_t + duration, start_samples + self.last_samples
            self.window_start = (start_count, start_t, start_samples)
        steps = count - start_count
        if steps >= plan.min_window_steps and (now - start_t >= plan.window_s or steps >= plan.max_window_steps):
            samples = self.samples - start_samples if self.samples_known else None
            wall_count, wall_t = self.wall_start
            self.windows.append(Window(count - start_count, now - start_t, samples, count - wall_count, now - wall_t))
            self.wall_start = (count, now)
            self.progress(f"window {len(self.windows)} {plan.windows}")
            if len(self.windows) >= plan.windows:
                self.stop("completed")
            self.window_start = (count, now, self.samples)

    def _classify_last_step(self) -> None:
        """Sort the step that just ended: part of an epoch's start (its first step and the steps while the
        workers refill their prefetch buffers), or an ordinary one."""
        self.restart_step = False
        if len(self.boundaries) > 1:
            duration = self.boundaries[-1] - self.boundaries[-2]
            if self.starts_epoch:
                self.span_left, self.span_total = self.plan.rewarm_steps, 0.0
            if self.span_left > 0:
                self.span_total += duration
                self.span_left -= 1
                self.restart_step = self.window_start is not None
                if self.span_left == 0:
                    self.restart_steps.append(self.span_total)
            elif self.window_start is not None:
                self.step_durations.append(duration)
        self.starts_epoch, self.epoch_started = self.epoch_started, False

    starts_epoch = False
    span_left, span_total = 0, 0.0

    def finish(self, status: str, error: Optional[ScriptError]) -> int:
        peak, _ = peak_memory()
        losses = torch.stack(self.losses).float().cpu().tolist() if self.losses else []
        b = self.boundaries
        measurement = Measurement(
            status=status,
            windows=tuple(self.windows),
            applied=tuple(self.instr.changes.applied),
            startup_s=b[0] - self.t0 if b else None,
            first_step_s=b[1] - b[0] if len(b) > 1 else None,
            losses=tuple(losses),
            peak_memory_bytes=peak if peak is not None else peak_rss_bytes(),
            steps_seen=len(b),
            error=error,
            restart_steps_s=tuple(self.restart_steps[1:]),  # the very first epoch start is the run's start-up
            step_median_s=float(sorted(self.step_durations)[len(self.step_durations) // 2]) if self.step_durations else None,
            steps_per_epoch=self.steps_per_epoch,
            rewarm_steps=self.plan.rewarm_steps,
        )
        write_json(self.run_dir / "measure.json", measurement)
        return 0 if status in ("completed", "script_finished", "timeout") else 1
