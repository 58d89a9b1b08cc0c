"""Held out from the samples (tests/test_apply.py): a loader whose every record takes 3 ms to "read", fed to a
small MLP in the main process. The patch diagnose hands back must make this script, run plainly, as fast as the
run claimed."""
import sys
import time

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset


class Records(Dataset):
    def __init__(self, count: int):
        generator = torch.Generator().manual_seed(1)
        self.features = torch.randn(count, 24, generator=generator)
        self.labels = torch.randint(0, 4, (count,), generator=generator)

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, index):
        time.sleep(0.003)  # a record from a slow store
        return self.features[index], self.labels[index]


def train(epochs: int) -> None:
    torch.set_num_threads(1)
    torch.manual_seed(0)
    records = DataLoader(Records(1920), batch_size=16, shuffle=True)
    model = nn.Sequential(nn.Linear(24, 48), nn.Tanh(), nn.Linear(48, 4))
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    step = 0
    for _ in range(epochs):
        for features, labels in records:
            optimizer.zero_grad()
            loss = nn.functional.cross_entropy(model(features), labels)
            loss.backward()
            optimizer.step()
            if step % 10 == 0:
                print(f"step {step} loss {loss.item():.3f}", flush=True)
            step += 1


if __name__ == "__main__":
    train(int(sys.argv[1]) if len(sys.argv) > 1 else 2)
