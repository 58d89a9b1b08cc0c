"""Data-loading bottleneck from a stream: an IterableDataset that reads each sample slowly.

Each sample takes 2 ms to arrive, as from a remote reader or a web-scale text stream. With batch_size=16 and
num_workers=0 the training process waits ~32 ms per batch. Streams are the normal input of large-scale
training, and the usual first version of one does not split its stream across DataLoader workers: with
num_workers=N every worker replays the whole stream and each sample is fed N times per epoch. `--shard` splits
it with torch.utils.data.get_worker_info(), after which workers are a real fix.
"""
import argparse
import time

import torch
from torch import nn
from torch.utils.data import DataLoader, IterableDataset, get_worker_info


class SlowStream(IterableDataset):
    """Synthetic classification samples that take `read_delay` seconds each to arrive."""

    def __init__(self, n_items, shard, n_features=32, n_classes=10, read_delay=0.002, seed=0):
        g = torch.Generator().manual_seed(seed)
        self.x = torch.randn(n_items, n_features, generator=g)
        self.y = torch.randint(0, n_classes, (n_items,), generator=g)
        self.shard, self.read_delay = shard, read_delay

    def __iter__(self):
        worker, workers = 0, 1
        info = get_worker_info()
        if self.shard and info is not None:
            worker, workers = info.id, info.num_workers  # each worker reads every workers-th sample only
        for i in range(len(self.x)):
            if i % workers == worker:
                time.sleep(self.read_delay)  # pretend the sample arrives from a slow remote reader
                yield self.x[i], self.y[i]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--num-items", type=int, default=1920)  # 120 batches / epoch
    parser.add_argument("--num-workers", type=int, default=0)
    parser.add_argument("--shard", action="store_true", help="split the stream across DataLoader workers")
    parser.add_argument("--read-delay", type=float, default=0.002, help="seconds for one sample to arrive")
    parser.add_argument("--log-every", type=int, default=20)
    args = parser.parse_args()

    torch.set_num_threads(1)
    torch.manual_seed(0)
    stream = SlowStream(args.num_items, args.shard, read_delay=args.read_delay)
    loader = DataLoader(stream, batch_size=args.batch_size, num_workers=args.num_workers)

    model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 10))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()

    step = 0
    for epoch in range(args.epochs):
        seen = 0
        for x, y in loader:
            optimizer.zero_grad()
            loss = loss_fn(model(x), y)
            loss.backward()
            optimizer.step()
            seen += len(x)
            if step % args.log_every == 0:
                print(f"epoch {epoch} step {step} loss {loss.item():.4f}", flush=True)
            step += 1
        print(f"epoch {epoch}: {seen} samples fed ({args.num_items} in the stream)", flush=True)
    print("done", flush=True)


if __name__ == "__main__":
    main()
