"""Fixture: a DataLoader worker that dies of a signal at item 200: SIGBUS (the default) as a worker does when
/dev/shm is too small for the batches in flight (Docker's 64 MB default), or SIGSEGV (--signal SEGV) as a crash in
a native library does; torch says "DataLoader worker (pid N) is killed by signal: Bus error" (issue 45)."""
import argparse
import os
import signal

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset


class Items(Dataset):
    def __len__(self):
        return 4096

    def __getitem__(self, i):
        if i == 200 and torch.utils.data.get_worker_info() is not None:
            os.kill(os.getpid(), getattr(signal, f"SIG{args.signal}"))
        return torch.randn(16), torch.randn(1)


parser = argparse.ArgumentParser()
parser.add_argument("--signal", choices=("BUS", "SEGV"), default="BUS")
args = parser.parse_args()
loader = DataLoader(Items(), batch_size=16, num_workers=2)
model = nn.Linear(16, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
for x, y in loader:
    loss = nn.functional.mse_loss(model(x), y)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
