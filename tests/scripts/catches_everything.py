"""Fixture: a training loop that swallows every exception.

Each step is wrapped in `try: ... except Exception: pass`, a pattern found
in real scripts to "keep training going". Anything raised inside the step
(including by a profiler's own hooks) is silently discarded. Otherwise a
normal small training run.
"""
import argparse

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


def main():
    parser = argparse.ArgumentParser(description="Train, ignoring any error in a step.")
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=32)
    args = parser.parse_args()

    torch.manual_seed(0)
    g = torch.Generator().manual_seed(0)
    x = torch.randn(8192, 64, generator=g)
    y = torch.randint(0, 10, (8192,), generator=g)
    loader = DataLoader(TensorDataset(x, y), batch_size=args.batch_size, shuffle=True)

    model = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 10))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()

    step = 0
    for epoch in range(args.epochs):
        for xb, yb in loader:
            try:
                optimizer.zero_grad()
                loss = loss_fn(model(xb), yb)
                loss.backward()
                optimizer.step()
                if step % 50 == 0:
                    print(f"epoch {epoch} step {step} loss {loss.item():.4f}", flush=True)
            except Exception:
                pass
            step += 1
    print("done", flush=True)


if __name__ == "__main__":
    main()
