"""A DataLoader loop that runs out of memory at its batch size under a 2 GiB limit, with epochs of four batches and
steps of seconds: the memory levers' timed runs must span epochs' restarts (issue 53). At --batch-size 65536 it fits.

    diagnose run --memory-limit 2G --budget-seconds 240 tests/scripts/oom_short_epochs.py
"""
import argparse

import torch
from torch import nn


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--batch-size", type=int, default=131072)
    parser.add_argument("--epochs", type=int, default=1000)
    args = parser.parse_args()

    torch.manual_seed(0)
    samples = 4 * 65536  # four batches an epoch at the batch that fits
    data = torch.randn(samples, 64)
    labels = torch.randint(0, 10, (samples,))
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(data, labels), batch_size=args.batch_size,
                                         shuffle=True)
    model = nn.Sequential(nn.Linear(64, 768), nn.ReLU(), nn.Linear(768, 768), nn.ReLU(), nn.Linear(768, 10))
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-2)
    for epoch in range(args.epochs):
        for x, y in loader:
            optimizer.zero_grad()
            nn.functional.cross_entropy(model(x), y).backward()
            optimizer.step()
        print(f"epoch {epoch} done", flush=True)


if __name__ == "__main__":
    main()
