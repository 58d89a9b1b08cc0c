"""DistributedDataParallel with two settings that cost time: `find_unused_parameters=True` although every
parameter gets a gradient (DDP walks the autograd graph after every forward), and gradient accumulation over
--accumulation micro-batches (default 4) whose every backward() all-reduces the gradients (no no_sync() on the
micro-batches before the last). gloo on CPU.

    diagnose run --nproc-per-node 2 sample_runs/ddp_settings.py
    torchrun --nproc-per-node 2 sample_runs/ddp_settings.py            # the same, without diagnose
    torchrun --nproc-per-node 2 sample_runs/ddp_settings.py --no-sync --no-find-unused   # both fixed by hand
"""
import argparse
import contextlib
import os
import time

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset


def make_model(width, depth):
    layers = [nn.Linear(64, width), nn.ReLU()]
    for _ in range(depth):
        layers += [nn.Linear(width, width), nn.ReLU()]
    return nn.Sequential(*layers, nn.Linear(width, 10))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--num-items", type=int, default=16000)
    parser.add_argument("--width", type=int, default=768)
    parser.add_argument("--depth", type=int, default=3)
    parser.add_argument("--accumulation", type=int, default=4, help="micro-batches per optimizer step")
    parser.add_argument("--max-steps", type=int, default=0, help="stop after this many optimizer steps (0: never)")
    parser.add_argument("--no-sync", action="store_true", help="the fix by hand: no_sync() before the last")
    parser.add_argument("--no-find-unused", action="store_true", help="the fix by hand: find_unused_parameters=False")
    parser.add_argument("--static-graph", action="store_true")
    parser.add_argument("--bucket-view", action="store_true", help="gradient_as_bucket_view=True")
    parser.add_argument("--bucket-cap-mb", type=float, default=25.0)
    args = parser.parse_args()

    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(0)
    dataset = TensorDataset(torch.randn(args.num_items, 64, generator=g), torch.randint(0, 10, (args.num_items,),
                                                                                       generator=g))
    sampler = DistributedSampler(dataset, shuffle=True, seed=0)
    loader = DataLoader(dataset, batch_size=args.batch_size, sampler=sampler)
    model = DistributedDataParallel(make_model(args.width, args.depth),
                                    find_unused_parameters=not args.no_find_unused, static_graph=args.static_graph,
                                    gradient_as_bucket_view=args.bucket_view, bucket_cap_mb=args.bucket_cap_mb)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    k = args.accumulation

    start, steps = time.perf_counter(), 0
    for epoch in range(args.epochs):
        sampler.set_epoch(epoch)
        for i, (x, y) in enumerate(loader):
            last = (i + 1) % k == 0
            with model.no_sync() if args.no_sync and not last else contextlib.nullcontext():
                loss = loss_fn(model(x), y) / k
                loss.backward()
            if last:
                optimizer.step()
                optimizer.zero_grad()
                steps += 1
                if steps % 20 == 0 and rank == 0:
                    print(f"epoch {epoch} step {steps} loss {loss.item() * k:.4f}", flush=True)
                if steps == args.max_steps:
                    break
        if steps == args.max_steps:
            break
    if rank == 0:
        print(f"done: {steps} steps in {time.perf_counter() - start:.2f} s", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    main()
