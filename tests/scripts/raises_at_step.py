"""Fixture: a normal small training loop that crashes at a given step.

Steps are counted from 0 over the DataLoader loop; at step N (default 7) the
script raises RuntimeError("boom at step N") inside the loop, after the
forward pass and before backward(). Used to test how a profiler reports a
script that fails mid-training. Usage: python raises_at_step.py [--at N] [--sigterm-on-error]

With --sigterm-on-error the process also receives SIGTERM while its error is being read, as a rank under
torchrun does when its collective fails because a peer died and torchrun stops the survivors at that moment.
"""
import argparse
import os
import signal
import time

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


class PeerClosedError(RuntimeError):
    def __str__(self):
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(0.05)  # the handler runs here, while the error is being formatted
        return super().__str__()


def main():
    parser = argparse.ArgumentParser(description="Train, then crash at a given step.")
    parser.add_argument("--at", type=int, default=7, help="step (from 0) at which to raise")
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--sigterm-on-error", action="store_true")
    args = parser.parse_args()

    torch.manual_seed(0)
    g = torch.Generator().manual_seed(0)
    x = torch.randn(2048, 32, generator=g)
    y = torch.randint(0, 10, (2048,), generator=g)
    loader = DataLoader(TensorDataset(x, y), batch_size=32, shuffle=True)

    model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 10))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    loss_fn = nn.CrossEntropyLoss()

    step = 0
    for epoch in range(args.epochs):
        for xb, yb in loader:
            optimizer.zero_grad()
            loss = loss_fn(model(xb), yb)
            if step == args.at:
                error = PeerClosedError if args.sigterm_on_error else RuntimeError
                raise error(f"boom at step {step}")
            loss.backward()
            optimizer.step()
            print(f"epoch {epoch} step {step} loss {loss.item():.4f}", flush=True)
            step += 1
    print("done", flush=True)


if __name__ == "__main__":
    main()
