"""One profiler for every profiled window: `diagnose run`'s capture and `diagnose.window(...)` write their traces
through capture/profiled_window.py, so the two traces are marked and recorded alike; the device is synchronised at a
window's two edges, never inside a step."""
from __future__ import annotations

import json
import time
from pathlib import Path

import torch

import diagnose
from diagnose.capture import profiled_window
from diagnose.capture.profiled_window import CLOCK_SYNC, ProfiledWindow


def _events(tb: Path) -> list[dict]:
    (trace,) = tb.glob("rank0.*.pt.trace.json")
    return json.loads(trace.read_text())["traceEvents"]


def _spans(tb: Path) -> list[dict]:
    return [e for e in _events(tb) if e.get("ph") == "X"]


def _marking(tb: Path) -> dict:
    """What a reader of the trace sees of how it was recorded: the clock-sync marks, the ProfilerStep numbers in
    order, and the profiler's options (memory events, input shapes, Python stacks)."""
    events = sorted(_spans(tb), key=lambda e: e["ts"])
    steps = [int(e["name"].split("#")[1]) for e in events if e["name"].startswith("ProfilerStep#")]
    syncs = [e for e in events if e["name"] == CLOCK_SYNC]
    first_step_ts = min(e["ts"] for e in events if e["name"].startswith("ProfilerStep#"))
    options = {"memory": any(e.get("name") == "[memory]" for e in _events(tb)),
               "shapes": any("Input Dims" in e.get("args", {}) for e in events),
               "stacks": any(e.get("cat") == "python_function" for e in events)}
    return {"clock_syncs_before_the_steps": sum(e["ts"] < first_step_ts for e in syncs), "steps": steps,
            "options": options}


def _train_in_a_window(run_dir: Path, at_step: int, steps: int) -> diagnose.Window:
    torch.manual_seed(0)
    model = torch.nn.Linear(16, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    with diagnose.window(at_step=at_step, steps=steps, out=run_dir, quiet=True) as window:
        for _ in range(at_step + steps + 3):
            window.step()
            loss = model(torch.randn(32, 16)).square().mean()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    return window


def test_the_api_window_and_diagnose_run_mark_their_traces_alike(tmp_path, sample_run):
    run = sample_run("slow_loader.py")  # --warmup 3 --steps 8
    assert run.returncode == 0, run.stderr[-2000:]
    window = _train_in_a_window(tmp_path / "window", at_step=4, steps=6)
    assert window.result(timeout=120).diagnosis.steps_profiled == 6

    from_run, from_window = _marking(run.run_dir / "tb"), _marking(tmp_path / "window" / "tb")
    assert from_window["steps"] == list(range(4, 10))
    first = from_run["steps"][0]
    assert from_run["steps"] == list(range(first, first + 8))
    assert from_run["clock_syncs_before_the_steps"] == from_window["clock_syncs_before_the_steps"] == 2
    assert from_run["options"] == from_window["options"] == {"memory": True, "shapes": True, "stacks": False}


def test_the_device_is_synchronised_at_the_windows_edges_outside_its_steps(tmp_path, monkeypatch):
    # No GPU here: the device sync is the one thing simulated, a 20 ms wait recorded as a trace event of its own
    def simulated_sync() -> bool:
        with torch.profiler.record_function("simulated device sync"):
            time.sleep(0.02)
        return True

    monkeypatch.setattr(profiled_window, "sync_device", simulated_sync)
    window = ProfiledWindow(tmp_path, "rank0")
    window.start()
    started_on_host = time.monotonic()
    for step in range(5):
        window.mark_step(step)
        torch.randn(64, 64).matmul(torch.randn(64, 64))
    window.stop()

    events = _spans(tmp_path)
    steps = [e for e in events if e["name"].startswith("ProfilerStep#")]
    syncs = [e for e in events if e["name"] == "simulated device sync"]
    assert len(steps) == 5
    assert len(syncs) == 1, "the first sync comes before the profiler starts; only the last is in the trace"
    last_step_end = max(e["ts"] + e["dur"] for e in steps)
    assert syncs[0]["ts"] >= last_step_end, "the window's closing wait is not part of its last step"
    assert window.started_at <= started_on_host and window.ended_at - window.started_at >= 0.02
