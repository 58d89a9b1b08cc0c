"""Two ranks in lockstep (gradients averaged by hand with all_reduce on gloo, after backward) whose step times
differ step by step: rank 1 pauses before its optimizer step on every odd step, so each rank sees the pause in a
different step (rank 0 waits for it in the next all-reduce). Planning from its own clock, each rank would fit a
different number of steps into --max-seconds; a rank that stops first leaves the other waiting in a collective.

    diagnose run --nproc-per-node 2 --max-seconds 14 tests/scripts/ranks_uneven_steps.py
"""
import argparse
import os
import time

import torch
import torch.distributed as dist
from torch import nn


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=80)
    parser.add_argument("--step-seconds", type=float, default=0.1, help="every rank's host work per step")
    parser.add_argument("--pause", type=float, default=0.6, help="rank 1's extra pause on odd steps")
    args = parser.parse_args()

    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = nn.Linear(32, 8)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(16, 32), torch.randn(16, 8)
    for step in range(args.steps):
        optimizer.zero_grad()
        nn.functional.mse_loss(model(x), y).backward()
        for p in model.parameters():  # the ranks meet here every step
            dist.all_reduce(p.grad)
            p.grad /= dist.get_world_size()
        time.sleep(args.step_seconds + (args.pause if rank == 1 and step % 2 else 0.0))
        optimizer.step()
    dist.destroy_process_group()


if __name__ == "__main__":
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    main()
