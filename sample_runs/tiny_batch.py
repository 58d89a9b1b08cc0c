"""Small-batch bottleneck: the step is dominated by per-op framework overhead.

The data is an in-memory TensorDataset (loading is essentially free) and the
model is a small MLP, but batch_size=2. Each training step launches the same
few dozen operators (forward, backward, optimizer update, zero_grad) no matter
how many samples are in the batch, and with only 2 samples each operator does
almost no arithmetic. The fixed per-op cost of Python, the dispatcher and
autograd dominates, so the step time barely changes if the batch grows:
a batch of 64 or 256 would process many times more samples per second.

The DataLoader's own work per batch (sampler, __getitem__ calls, collate) is
tens of microseconds too, so a few percent of each step waits for data. That
is per-batch overhead, not a slow loader: worker processes make the loop
slower (each batch then also crosses between processes).

Typical fix: increase the batch size (and scale the learning rate).
"""
import argparse

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


def make_data(n_items, n_features=64, n_classes=10, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n_items, n_features, generator=g)
    w = torch.randn(n_features, n_classes, generator=g)
    y = (x @ w).argmax(dim=1)
    return TensorDataset(x, y)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=2)
    parser.add_argument("--num-items", type=int, default=32000)  # 16x the batch still runs 2000 steps
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--log-every", type=int, default=200)
    args = parser.parse_args()

    # Small model on CPU: extra intra-op threads only add synchronisation cost
    # (and thrash when other jobs share the machine), so use one.
    torch.set_num_threads(1)
    torch.manual_seed(0)
    dataset = make_data(args.num_items)
    loader = DataLoader(dataset, batch_size=args.batch_size, shuffle=True)

    model = nn.Sequential(
        nn.Linear(64, 128), nn.ReLU(),
        nn.Linear(128, 128), nn.ReLU(),
        nn.Linear(128, 10),
    )
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    loss_fn = nn.CrossEntropyLoss()

    step = 0
    for epoch in range(args.epochs):
        model.train()
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
