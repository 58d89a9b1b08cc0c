"""Fixture: a small CPU training loop of a fixed number of steps, its forward inside
`torch.autocast("cpu", dtype=torch.bfloat16, enabled=...)` as scripts with a `--bf16` flag write it.

Usage: python small_loop.py [--steps N] [--autocast off|bf16]. With `--autocast off` the region is entered
disabled: the model runs in fp32, and diagnose must not count that as autocast used.
"""
import argparse

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


def main():
    parser = argparse.ArgumentParser(description="A small CPU training loop of a fixed number of steps.")
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--autocast", choices=("off", "bf16"), default="off")
    args = parser.parse_args()

    torch.manual_seed(0)
    torch.set_num_threads(1)  # steady step times on a shared machine
    g = torch.Generator().manual_seed(0)
    x = torch.randn(args.steps * 32, 64, generator=g)
    y = torch.randint(0, 10, (args.steps * 32,), generator=g)
    loader = DataLoader(TensorDataset(x, y), batch_size=32)  # exactly --steps batches, one epoch
    model = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 10))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    loss_fn = nn.CrossEntropyLoss()

    for xb, yb in loader:
        optimizer.zero_grad()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.autocast == "bf16"):
            loss = loss_fn(model(xb), yb)
        loss.backward()
        optimizer.step()
    print("done", flush=True)


if __name__ == "__main__":
    main()
