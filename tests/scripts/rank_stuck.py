"""Two ranks on gloo; at step 8 rank 1 stops in a read that never returns (a sleep stands in for a hung file system
or a network read), so rank 0 waits in its all_reduce for ever: gloo's wait is in native code and never returns to
Python (issue 45: under torchrun, every rank's stack).

    diagnose run --nproc-per-node 2 --max-seconds 8 tests/scripts/rank_stuck.py
"""
import os
import time

import torch
import torch.distributed as dist
from torch import nn


def read_next_shard():
    time.sleep(3600)  # a read that never returns


def main():
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = nn.Linear(32, 8)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(16, 32), torch.randn(16, 8)
    for step in range(200):
        if rank == 1 and step == 8:
            read_next_shard()
        optimizer.zero_grad()
        nn.functional.mse_loss(model(x), y).backward()
        for p in model.parameters():
            dist.all_reduce(p.grad)
        optimizer.step()
        time.sleep(0.02)
    dist.destroy_process_group()


if __name__ == "__main__":
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    main()
