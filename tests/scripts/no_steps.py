"""Fixture: a script that imports torch and computes forever without ever
reaching a training step.

There is no DataLoader, no backward() and no optimizer: it loops on plain
tensor maths with a short sleep between iterations. Used to test that a
profiler gives up (times out / reports "no training steps found") instead of
waiting forever.
"""
import time

import torch


def main():
    torch.manual_seed(0)
    a = torch.randn(64, 64)
    i = 0
    while True:
        a = torch.tanh(a @ a.T / 64.0)
        if i % 100 == 0:
            print(f"iteration {i} mean {a.mean().item():.4f}", flush=True)
        i += 1
        time.sleep(0.01)


if __name__ == "__main__":
    main()
