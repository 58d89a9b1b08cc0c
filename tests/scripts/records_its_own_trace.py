"""Fixture: a training loop that profiles itself the way the PyTorch docs show (schedule, TensorBoard handler,
with_stack=True), as a user's existing trace would have been made, then exits. Each step also runs a slow
host-side function (log_to_disk: ~8 ms), so the trace's bottleneck is host work in the user's own code.

Usage: python records_its_own_trace.py OUT_DIR
"""
import sys
import time

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


def log_to_disk(step, loss):
    time.sleep(0.008)  # a blocking write of the metrics every step
    return f"{step} {loss:.4f}"


def main(out_dir):
    torch.manual_seed(0)
    data = TensorDataset(torch.randn(512, 64), torch.randint(0, 10, (512,)))
    loader = DataLoader(data, batch_size=32, shuffle=True)
    model = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 10))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    loss_fn = nn.CrossEntropyLoss()
    schedule = torch.profiler.schedule(wait=1, warmup=1, active=6, repeat=1)
    with torch.profiler.profile(schedule=schedule, with_stack=True, record_shapes=True,
                                on_trace_ready=torch.profiler.tensorboard_trace_handler(out_dir)) as profiler:
        for step, (x, y) in enumerate(loader):
            optimizer.zero_grad()
            loss = loss_fn(model(x), y)
            loss.backward()
            optimizer.step()
            log_to_disk(step, loss.item())
            profiler.step()
            if step == 9:
                break


if __name__ == "__main__":
    main(sys.argv[1])
