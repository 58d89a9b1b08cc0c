"""A small training loop whose data can be fed right or wrong, for the tests of what experiments fed the model.

--stream: an IterableDataset (else a map-style Dataset, shuffled with --shuffle); --shard splits the stream across
workers with get_worker_info(); --worker-shuffle has each worker shuffle the whole stream with its own seed (a
common bug: the workers' streams differ, yet every worker reads every sample); --drop-every-other wraps the
dataset so that only every second sample is ever fed (a deliberately wrong change)."""
import argparse
import random
import time

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset, IterableDataset, get_worker_info

N_ITEMS = 1920


def items(seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(N_ITEMS, 16, generator=g), torch.randint(0, 4, (N_ITEMS,), generator=g)


class Items(Dataset):
    def __init__(self, delay):
        self.x, self.y = items()
        self.delay = delay

    def __len__(self):
        return N_ITEMS

    def __getitem__(self, i):
        time.sleep(self.delay)
        return self.x[i], self.y[i]


class EveryOther(Dataset):
    def __init__(self, dataset):
        self.dataset = dataset

    def __len__(self):
        return len(self.dataset) // 2

    def __getitem__(self, i):
        return self.dataset[2 * i]


class Stream(IterableDataset):
    def __init__(self, delay, shard, worker_shuffle):
        self.x, self.y = items()
        self.delay, self.shard, self.worker_shuffle = delay, shard, worker_shuffle

    def __iter__(self):
        info = get_worker_info()
        order = list(range(N_ITEMS))
        if self.worker_shuffle and info is not None:
            random.Random(info.id).shuffle(order)  # its own order, but still the whole stream
        worker, workers = (info.id, info.num_workers) if self.shard and info is not None else (0, 1)
        for i in order[worker::workers]:
            time.sleep(self.delay)
            yield self.x[i], self.y[i]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--stream", action="store_true")
    parser.add_argument("--shard", action="store_true")
    parser.add_argument("--worker-shuffle", action="store_true")
    parser.add_argument("--shuffle", action="store_true")
    parser.add_argument("--drop-every-other", action="store_true")
    parser.add_argument("--num-workers", type=int, default=0)
    parser.add_argument("--delay", type=float, default=0.001)
    parser.add_argument("--epochs", type=int, default=3)
    args = parser.parse_args()

    torch.set_num_threads(1)
    torch.manual_seed(0)
    if args.stream:
        dataset = Stream(args.delay, args.shard, args.worker_shuffle)
        loader = DataLoader(dataset, batch_size=16, num_workers=args.num_workers)
    else:
        dataset = Items(args.delay)
        if args.drop_every_other:
            dataset = EveryOther(dataset)
        loader = DataLoader(dataset, batch_size=16, shuffle=args.shuffle, num_workers=args.num_workers)
    model = nn.Linear(16, 4)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    for _ in range(args.epochs):
        for x, y in loader:
            optimizer.zero_grad()
            nn.functional.cross_entropy(model(x), y).backward()
            optimizer.step()


if __name__ == "__main__":
    main()
