"""Fixture: a long start-up in the script's own code (a data-loading function that sleeps, as reading and
tokenising a corpus would), then a small training loop. Usage: slow_start.py [SECONDS] (default 90)."""
import sys
import time

import torch
from torch.utils.data import DataLoader, TensorDataset


def load_dataset(seconds: float) -> TensorDataset:
    time.sleep(seconds)  # the slow part: reading, decoding, tokenising
    g = torch.Generator().manual_seed(0)
    return TensorDataset(torch.randn(8192, 32, generator=g), torch.randint(0, 10, (8192,), generator=g))


def main():
    data = load_dataset(float(sys.argv[1]) if len(sys.argv) > 1 else 90.0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    for epoch in range(20):
        for x, y in DataLoader(data, batch_size=64, shuffle=True):
            loss = torch.nn.functional.cross_entropy(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()


if __name__ == "__main__":
    main()
