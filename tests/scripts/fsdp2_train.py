"""FSDP2 (fully_shard) on gloo, CPU: each block of an MLP sharded as a unit, then the root; every unit reshards its
parameters after forward (torch's default for non-root units) and all-gathers them again in backward.

    torchrun --nproc-per-node 2 tests/scripts/fsdp2_train.py [--no-reshard]
"""
import argparse
import os
import time

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.fsdp import fully_shard
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--width", type=int, default=512)
    parser.add_argument("--blocks", type=int, default=4)
    parser.add_argument("--num-items", type=int, default=8192)
    parser.add_argument("--no-reshard", action="store_true", help="reshard_after_forward=False on every block")
    args = parser.parse_args()
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(0)
    dataset = TensorDataset(torch.randn(args.num_items, args.width, generator=g),
                            torch.randint(0, 10, (args.num_items,), generator=g))
    sampler = DistributedSampler(dataset, seed=0)
    loader = DataLoader(dataset, batch_size=32, sampler=sampler)
    model = nn.Sequential(*[nn.Sequential(nn.Linear(args.width, args.width), nn.ReLU()) for _ in range(args.blocks)],
                          nn.Linear(args.width, 10))
    for block in model[:-1]:
        fully_shard(block, reshard_after_forward=not args.no_reshard)
    fully_shard(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    loss_fn = nn.CrossEntropyLoss()
    start = time.perf_counter()
    for step, (x, y) in enumerate(loader):
        loss = loss_fn(model(x), y)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    if dist.get_rank() == 0:
        print(f"done: {step + 1} steps in {time.perf_counter() - start:.2f} s", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    main()
