"""Multi-process training where one rank holds the others back: DistributedDataParallel on gloo (CPU).

Every rank reads its share of the data through a DataLoader whose items take 1 ms to "read"; on rank
--slow-rank (default 1) they take --slow-factor (default 8) times longer, as if that rank's node had a slow
disk. DDP all-reduces the gradients in every backward(), so the fast ranks wait there for the slow one each
step: their time goes into communication, the slow rank's into data loading.

    diagnose run --nproc-per-node 2 sample_runs/ddp_straggler.py
    torchrun --nproc-per-node 2 sample_runs/ddp_straggler.py      # the same, without diagnose
"""
import argparse
import os
import time

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, Dataset, DistributedSampler


class SlowStorageDataset(Dataset):
    def __init__(self, n_items, read_delay, n_features=32, n_classes=10, seed=0):
        g = torch.Generator().manual_seed(seed)
        self.x = torch.randn(n_items, n_features, generator=g)
        self.y = torch.randint(0, n_classes, (n_items,), generator=g)
        self.read_delay = read_delay

    def __len__(self):
        return len(self.x)

    def __getitem__(self, idx):
        time.sleep(self.read_delay)
        return self.x[idx], self.y[idx]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--num-items", type=int, default=1600)
    parser.add_argument("--read-delay", type=float, default=0.001)
    parser.add_argument("--slow-rank", type=int, default=1)
    parser.add_argument("--slow-factor", type=float, default=8.0)
    parser.add_argument("--crash-rank", type=int, default=-1, help="this rank raises an error at --crash-step")
    parser.add_argument("--crash-step", type=int, default=10)
    args = parser.parse_args()

    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    delay = args.read_delay * (args.slow_factor if rank == args.slow_rank else 1.0)
    dataset = SlowStorageDataset(args.num_items, delay)
    sampler = DistributedSampler(dataset, shuffle=True, seed=0)
    loader = DataLoader(dataset, batch_size=args.batch_size, sampler=sampler, num_workers=0)
    model = DistributedDataParallel(nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 10)))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()

    step = 0
    for epoch in range(args.epochs):
        sampler.set_epoch(epoch)
        for x, y in loader:
            if rank == args.crash_rank and step == args.crash_step:
                raise RuntimeError(f"rank {rank} cannot read its shard (simulated failure at step {step})")
            optimizer.zero_grad()
            loss = loss_fn(model(x), y)
            loss.backward()
            optimizer.step()
            if step % 20 == 0 and rank == 0:
                print(f"epoch {epoch} step {step} loss {loss.item():.4f}", flush=True)
            step += 1
    dist.destroy_process_group()
    if rank == 0:
        print("done", flush=True)


if __name__ == "__main__":
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    main()
