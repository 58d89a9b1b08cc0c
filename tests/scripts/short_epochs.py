"""Epochs of a few steps with a start-up that costs as much as two of them: the sampler sleeps --restart-ms when
each epoch begins, each step --step-ms. A user's run pays (steps x step + restart) per epoch; timed windows of
steady steps could never hold one (issue 53). --accumulate N makes each optimizer step N micro-batches."""
import argparse
import time

import torch
from torch import nn


class SlowStartSampler(torch.utils.data.Sampler):
    def __init__(self, n: int, restart_s: float):
        self.n, self.restart_s = n, restart_s

    def __len__(self):
        return self.n

    def __iter__(self):
        time.sleep(self.restart_s)
        return iter(range(self.n))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--batches", type=int, default=4, help="batches an epoch")
    parser.add_argument("--step-ms", type=float, default=10.0)
    parser.add_argument("--restart-ms", type=float, default=20.0)
    parser.add_argument("--accumulate", type=int, default=1)
    parser.add_argument("--epochs", type=int, default=100_000)
    args = parser.parse_args()

    torch.manual_seed(0)
    data = torch.utils.data.TensorDataset(torch.randn(args.batches * 8, 4), torch.randn(args.batches * 8, 1))
    loader = torch.utils.data.DataLoader(data, batch_size=8, sampler=SlowStartSampler(len(data),
                                                                                     args.restart_ms / 1000))
    model = nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    for _ in range(args.epochs):
        for i, (x, y) in enumerate(loader):
            nn.functional.mse_loss(model(x), y).backward()
            time.sleep(args.step_ms / 1000)
            if (i + 1) % args.accumulate == 0:
                optimizer.step()
                optimizer.zero_grad()


if __name__ == "__main__":
    main()
