"""Timed windows on a GPU synchronise the device at their edges, never inside: a GPU-bound variant's throughput
is then the GPU's, not how fast the host enqueues. No GPU exists here: the device is simulated (a clock that the
host advances by its own time per step, and a queue that a sync drains), the only thing mocked."""
from __future__ import annotations

from pathlib import Path

import pytest

from diagnose.capture.instrument import StopCapture
from diagnose.experiments import measure
from diagnose.model import MeasurePlan, RunConfig


class SimulatedGpu:
    """The host spends host_s per step enqueueing work the device needs device_s for."""

    def __init__(self, host_s: float, device_s: float, queue_steps: int = 0):
        self.now, self.device_free_at = 0.0, 0.0
        self.host_s, self.device_s = host_s, device_s
        self.queue_steps = queue_steps  # the launch queue holds this many steps' work (0: unbounded)
        self.syncs: list[int] = []

    def monotonic(self) -> float:
        return self.now

    def step(self) -> None:
        self.device_free_at = max(self.device_free_at, self.now) + self.device_s
        self.now += self.host_s
        if self.queue_steps:  # a full launch queue blocks the host until the device makes room
            self.now = max(self.now, self.device_free_at - self.queue_steps * self.device_s)

    def sync(self, step: int) -> bool:
        self.syncs.append(step)
        self.now = max(self.now, self.device_free_at)
        return True


def _measure(monkeypatch, tmp_path: Path, gpu: SimulatedGpu, epoch_steps: int = 0) -> measure.MeasureSession:
    plan = MeasurePlan(warmup_steps=3, warmup_s=0.0, window_s=0.05, min_window_steps=5, max_window_steps=40, windows=3)
    config = RunConfig(script="train.py", script_args=(), out_dir=str(tmp_path), warmup_steps=0, profile_steps=0,
                       max_seconds=60, measure=plan)
    monkeypatch.setattr(measure.time, "monotonic", gpu.monotonic)
    session = measure.MeasureSession(config, tmp_path, lambda line: None)
    monkeypatch.setattr(measure, "sync_device", lambda: gpu.sync(len(session.boundaries)))
    monkeypatch.setattr(measure, "device_in_use", lambda: True)
    with pytest.raises(StopCapture):
        for step in range(500):
            if epoch_steps and step % epoch_steps == 0:
                session.on_epoch(range(epoch_steps))  # the loader's iterator is made again: a new epoch
            session.on_boundary(len(session.boundaries) + 1)
            gpu.step()
    return session


def test_gpu_bound_windows_measure_the_devices_rate(monkeypatch, tmp_path):
    gpu = SimulatedGpu(host_s=0.001, device_s=0.010)  # the host could enqueue 1000 steps/s; the GPU runs 100
    session = _measure(monkeypatch, tmp_path, gpu)
    assert len(session.timings) == 2  # steady: two windows that agree end the timing
    for window in session.timings:
        assert window.steps / window.seconds == pytest.approx(100, rel=0.1)


def test_the_device_is_synchronised_at_window_edges_only(monkeypatch, tmp_path):
    gpu = SimulatedGpu(host_s=0.001, device_s=0.010)
    session = _measure(monkeypatch, tmp_path, gpu)
    timed = sum(w.steps for w in session.timings)
    in_windows = [s for s in gpu.syncs if s > session.plan.warmup_steps + 1]
    assert len(in_windows) <= len(session.timings) + 1  # one per window edge, not one per timed step
    assert timed >= 2 * session.plan.min_window_steps


def test_windows_that_disagree_are_timed_up_to_the_plans_count(monkeypatch, tmp_path):
    gpu = SimulatedGpu(host_s=0.001, device_s=0.010)
    step = gpu.step

    def drifting() -> None:  # the machine slows down as the run goes on: the windows disagree
        gpu.device_s *= 1.01
        step()

    gpu.step = drifting
    session = _measure(monkeypatch, tmp_path, gpu)
    assert len(session.timings) == session.plan.windows == 3


def test_windows_cut_by_short_epochs_are_still_timed_at_the_gpus_pace(monkeypatch, tmp_path):
    """An epoch's start cuts a window at a boundary that was not synchronised: on a GPU such a window is dropped,
    not timed at the host's enqueue rate (7x too fast in this simulation before)."""
    gpu = SimulatedGpu(host_s=0.001, device_s=0.010, queue_steps=8)
    session = _measure(monkeypatch, tmp_path, gpu, epoch_steps=14)
    assert session.timings
    for window in session.timings:
        assert window.steps / window.seconds == pytest.approx(100, rel=0.1)
