"""Host-overhead bottleneck: blocking Python work on every step.

Data is in memory and the model is a modest MLP (a step takes a few ms),
but after every step the script calls log_metrics(), which writes the
metrics synchronously and blocks for ~10 ms (simulated with time.sleep on
the marked line: think of an unbuffered write to a network file system or a
blocking call to an experiment tracker). That host-side work is not data
loading and not model compute, yet it makes up most of each step, so the
profiler should report host overhead and point at the sleep line in
log_metrics().

Typical fixes: log less often, buffer metrics, move I/O to a background thread.
"""
import argparse
import time

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


def log_metrics(step, loss, history):
    """Record the metrics of one step, synchronously (slow on purpose)."""
    history.append((step, loss))
    time.sleep(0.01)  # blocking write of the metrics: ~10 ms of host overhead per step


def make_data(n_items, n_features=128, n_classes=10, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n_items, n_features, generator=g)
    w = torch.randn(n_features, n_classes, generator=g)
    y = (x @ w).argmax(dim=1)
    return TensorDataset(x, y)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--num-items", type=int, default=19200)  # 300 steps / epoch
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--log-every", type=int, default=50)
    args = parser.parse_args()

    # Modest model on CPU: one intra-op thread keeps step times steady when
    # other jobs share the machine.
    torch.set_num_threads(1)
    torch.manual_seed(0)
    dataset = make_data(args.num_items)
    loader = DataLoader(dataset, batch_size=args.batch_size, shuffle=True)

    model = nn.Sequential(
        nn.Linear(128, 256), nn.ReLU(),
        nn.Linear(256, 256), nn.ReLU(),
        nn.Linear(256, 10),
    )
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    loss_fn = nn.CrossEntropyLoss()

    history = []
    step = 0
    for epoch in range(args.epochs):
        model.train()
        for x, y in loader:
            optimizer.zero_grad()
            loss = loss_fn(model(x), y)
            loss.backward()
            optimizer.step()
            log_metrics(step, loss.item(), history)
            if step % args.log_every == 0:
                print(f"epoch {epoch} step {step} loss {loss.item():.4f}", flush=True)
            step += 1
    print("done", flush=True)


if __name__ == "__main__":
    main()
