"""Fixture: a DataLoader worker that never returns item 100 (its __getitem__ waits on a lock nothing releases), so the
main process waits for ever on that batch, as a stuck decoder or a network read without a timeout leaves it
(issue 45)."""
import threading

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

NEVER = threading.Lock()
NEVER.acquire()


class Items(Dataset):
    def __len__(self):
        return 4096

    def __getitem__(self, index):
        if index == 100:
            NEVER.acquire()  # the worker's copy of the held lock: never released
        return torch.randn(16), torch.randn(1)


if __name__ == "__main__":
    torch.manual_seed(0)
    loader = DataLoader(Items(), batch_size=16, num_workers=2)
    model = nn.Linear(16, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    for x, y in loader:
        loss = nn.functional.mse_loss(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
