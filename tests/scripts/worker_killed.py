"""Fixture: a DataLoader worker killed with SIGKILL at item 400 of the first epoch (step 25 of batches of 16), as the
out-of-memory killer or a container's cgroup does: the main process gets torch's "DataLoader worker (pid N) is
killed by signal: Killed" (issue 45, third case)."""
import os
import signal
import time

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset


class Items(Dataset):
    def __len__(self):
        return 4096

    def __getitem__(self, i):
        if i == 400 and torch.utils.data.get_worker_info() is not None:
            HELD.append(b"x" * (256 << 20))  # what an out-of-memory kill finds: a worker that grew (written: resident)
            time.sleep(0.5)  # long enough for the samplers to see it
            os.kill(os.getpid(), signal.SIGKILL)
        return torch.randn(16), torch.randn(1)


HELD = []
loader = DataLoader(Items(), batch_size=16, num_workers=2)
model = nn.Linear(16, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for epoch in range(2):
    for x, y in loader:
        loss = nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
