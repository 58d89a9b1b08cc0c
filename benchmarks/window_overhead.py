"""What diagnose.window costs a training loop outside its window (the callbacks' per-step cost is the same call).

    python benchmarks/window_overhead.py [--blocks 20] [--steps 200] [--batch 64]

Two measurements, in one process:
- the call itself: window.step() with the window far ahead (at_step) and with the slowdown watch (when_slower,
  set so it never fires), the best of 5 repeats of 20,000 calls;
- a tiny MLP's training loop (the cheapest real step, so the largest share) timed in blocks of --steps steps,
  plain and calling window.step() each step, interleaved A B B A; throughput ratio with a 99% interval
  (diagnose.verdict.stats.compare, one value per block).
"""
from __future__ import annotations

import argparse
import time
import timeit

import torch

import diagnose
from diagnose.verdict.stats import compare


def call_cost_s(window) -> float:
    return min(timeit.repeat(window.step, number=20_000, repeat=5)) / 20_000


def block_steps_per_s(steps: int, batch: int, window=None) -> float:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(batch, 32), torch.randn(batch, 1)
    start = time.perf_counter()
    for _ in range(steps):
        if window is not None:
            window.step()
        loss = torch.nn.functional.mse_loss(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return steps / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--blocks", type=int, default=20)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--batch", type=int, default=64)
    args = parser.parse_args()
    torch.set_num_threads(1)
    at = call_cost_s(diagnose.window(at_step=10**12, quiet=True))
    slower = diagnose.window(when_slower=10**9, quiet=True)
    for _ in range(100):  # past the steps the running median needs, so every call compares against it
        slower.step()
    watch = call_cost_s(slower)
    plain, windowed = [], []
    window = diagnose.window(at_step=10**12, quiet=True)
    block_steps_per_s(args.steps, args.batch)  # warm-up
    for block in range(args.blocks):
        order = (False, True) if block % 2 == 0 else (True, False)
        for with_window in order:
            (windowed if with_window else plain).append(
                block_steps_per_s(args.steps, args.batch, window if with_window else None))
    step_s = 1 / sorted(plain)[len(plain) // 2]
    result = compare(plain, windowed)
    print(f"window.step() outside the window: {at * 1e6:.2f} us (at_step), {watch * 1e6:.2f} us (when_slower)")
    print(f"tiny MLP step (batch {args.batch}, 1 thread): {step_s * 1e3:.3f} ms; the call is "
          f"{at / step_s:.2%} (at_step), {watch / step_s:.2%} (when_slower) of it")
    print(f"loop with window.step() / plain loop, steps/s: {result.speedup:.4f} "
          f"[{result.ci[0]:.4f}-{result.ci[1]:.4f}] (99%, {args.blocks} blocks of {args.steps} steps each): "
          f"{result.verdict}")


if __name__ == "__main__":
    main()
