"""Fixture: a training loop that deadlocks in its 9th step (from 0, step 8): it takes a lock it already holds, as a
hung collective, a stuck DataLoader worker or a blocking queue leaves a loop waiting for ever (issue 45)."""
import threading

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


def wait_for_the_others(lock):
    lock.acquire()  # never returns: the lock is held, and nothing will release it


torch.manual_seed(0)
loader = DataLoader(TensorDataset(torch.randn(2048, 16), torch.randn(2048, 1)), batch_size=16)
model = nn.Linear(16, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
lock = threading.Lock()
lock.acquire()
for step, (x, y) in enumerate(loader):
    loss = nn.functional.mse_loss(model(x), y)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    if step == 8:
        wait_for_the_others(lock)
