"""A normal training script that needs command-line arguments and imports its
model from a sibling module.

It shows no particular bottleneck (in-memory data, small MLP, batch 32); it
exists to check that a profiler runs the script the way `python train.py`
would: its own directory must be on sys.path so `from model_def import Net`
works, and its arguments must be passed through. Usage:

    python train.py --lr 0.01 4096

`--lr` (float) and the positional `data_size` (int, number of samples) are
required; without them argparse prints its usual usage error and exits with
status 2.
"""
import argparse

import torch
from model_def import Net
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


def make_data(n_items, n_features=32, n_classes=4, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n_items, n_features, generator=g)
    w = torch.randn(n_features, n_classes, generator=g)
    y = (x @ w).argmax(dim=1)
    return TensorDataset(x, y)


def main():
    parser = argparse.ArgumentParser(description="Train Net on synthetic data.")
    parser.add_argument("data_size", type=int, help="number of training samples")
    parser.add_argument("--lr", type=float, required=True, help="learning rate")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--log-every", type=int, default=50)
    args = parser.parse_args()

    torch.manual_seed(0)
    loader = DataLoader(make_data(args.data_size), batch_size=args.batch_size, shuffle=True)
    model = Net()
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()

    print(f"training on {args.data_size} samples, lr={args.lr}", flush=True)
    step = 0
    for epoch in range(args.epochs):
        for x, y in loader:
            optimizer.zero_grad()
            loss = loss_fn(model(x), y)
            loss.backward()
            optimizer.step()
            if step % args.log_every == 0:
                print(f"epoch {epoch} step {step} loss {loss.item():.4f}", flush=True)
            step += 1
    print("done", flush=True)


if __name__ == "__main__":
    main()
