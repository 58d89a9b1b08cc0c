"""Training without DataLoader or torch.optim: steps are only visible
through backward().

Batches are sliced by hand from in-memory tensors and the parameters are
updated with a hand-written SGD rule under torch.no_grad()
(p -= lr * p.grad; p.grad = None). There is no DataLoader iterator and no
optimizer.step() to hook, so a profiler must delimit training steps by the
calls to loss.backward(). The workload itself is healthy and compute-bound
(MLP with 512 hidden units, batch 64, ~20 ms per step on 2 CPU cores).
"""
import argparse

import torch
from torch import nn


def make_data(n_items, n_features=256, n_classes=10, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n_items, n_features, generator=g)
    w = torch.randn(n_features, n_classes, generator=g)
    y = (x @ w).argmax(dim=1)
    return x, y


def sgd_update(params, lr):
    with torch.no_grad():
        for p in params:
            p -= lr * p.grad
            p.grad = None


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--num-items", type=int, default=19200)  # 300 steps / epoch
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--log-every", type=int, default=50)
    args = parser.parse_args()

    torch.manual_seed(0)
    x_all, y_all = make_data(args.num_items)
    model = nn.Sequential(
        nn.Linear(256, 512), nn.ReLU(),
        nn.Linear(512, 512), nn.ReLU(),
        nn.Linear(512, 10),
    )
    params = list(model.parameters())
    loss_fn = nn.CrossEntropyLoss()

    step = 0
    for epoch in range(args.epochs):
        perm = torch.randperm(args.num_items)
        for start in range(0, args.num_items, args.batch_size):
            idx = perm[start:start + args.batch_size]
            x, y = x_all[idx], y_all[idx]
            loss = loss_fn(model(x), y)
            loss.backward()
            sgd_update(params, args.lr)
            if step % args.log_every == 0:
                print(f"epoch {epoch} step {step} loss {loss.item():.4f}", flush=True)
            step += 1
    print("done", flush=True)


if __name__ == "__main__":
    main()
