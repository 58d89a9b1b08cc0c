"""Data-loading bottleneck: every sample comes from slow storage.

The Dataset's __getitem__ sleeps 4 ms per item to simulate reading each
sample from a slow disk / network file system. With batch_size=16 and
num_workers=0 the main process spends ~64 ms per batch just fetching data,
while the forward/backward/optimizer step of the small MLP takes well under
1 ms. So more than 80% of every training step is spent waiting in the
DataLoader's next(): the GPU/CPU doing the maths sits idle.

Typical fixes: DataLoader(num_workers>0), caching, faster storage.
"""
import argparse
import time

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset


class SlowStorageDataset(Dataset):
    """Synthetic classification samples that take 4 ms each to "read"."""

    def __init__(self, n_items, n_features=32, n_classes=10, read_delay=0.004, seed=0):
        g = torch.Generator().manual_seed(seed)
        self.x = torch.randn(n_items, n_features, generator=g)
        self.y = torch.randint(0, n_classes, (n_items,), generator=g)
        self.read_delay = read_delay

    def __len__(self):
        return len(self.x)

    def __getitem__(self, idx):
        time.sleep(self.read_delay)  # pretend we read this sample from slow storage
        return self.x[idx], self.y[idx]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--num-items", type=int, default=1920)  # 120 batches / epoch
    parser.add_argument("--num-workers", type=int, default=0)
    parser.add_argument("--persistent-workers", action="store_true")
    parser.add_argument("--read-delay", type=float, default=0.004, help="seconds to read one item")
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--log-every", type=int, default=20)
    args = parser.parse_args()

    # The model is tiny: one intra-op thread is enough and avoids waking a
    # thread pool after every (long) wait for data.
    torch.set_num_threads(1)
    torch.manual_seed(0)
    dataset = SlowStorageDataset(args.num_items, read_delay=args.read_delay)
    loader = DataLoader(dataset, batch_size=args.batch_size, shuffle=True,
                        num_workers=args.num_workers, persistent_workers=args.persistent_workers)

    model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 10))
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
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
