"""Fixture: a normal small training loop with side effects in the current
working directory.

Every step it appends a line to "train.log", and every 5 steps it saves the
model's state_dict to "ckpt.pt" (both relative paths). Used to test where a
profiler runs the script and what it leaves behind.
"""
import argparse

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


def main():
    parser = argparse.ArgumentParser(description="Train and write a log and checkpoints.")
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=32)
    args = parser.parse_args()

    torch.manual_seed(0)
    g = torch.Generator().manual_seed(0)
    x = torch.randn(4096, 32, generator=g)
    y = torch.randint(0, 10, (4096,), generator=g)
    loader = DataLoader(TensorDataset(x, y), batch_size=args.batch_size, shuffle=True)

    model = nn.Sequential(nn.Linear(32, 128), nn.ReLU(), nn.Linear(128, 10))
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    loss_fn = nn.CrossEntropyLoss()

    step = 0
    for epoch in range(args.epochs):
        for xb, yb in loader:
            optimizer.zero_grad()
            loss = loss_fn(model(xb), yb)
            loss.backward()
            optimizer.step()
            with open("train.log", "a") as f:
                f.write(f"epoch {epoch} step {step} loss {loss.item():.4f}\n")
            if step % 5 == 0:
                torch.save(model.state_dict(), "ckpt.pt")
            if step % 25 == 0:
                print(f"epoch {epoch} step {step} loss {loss.item():.4f}", flush=True)
            step += 1
    print("done", flush=True)


if __name__ == "__main__":
    main()
