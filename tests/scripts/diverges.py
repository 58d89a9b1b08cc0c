"""Fixture: a regression trained with SGD at a learning rate far too high: the loss overflows within a few steps
and is NaN from then on, while the loop goes on as if it were training (issue 45's first case)."""
import argparse

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

parser = argparse.ArgumentParser()
parser.add_argument("--lr", type=float, default=10.0)
parser.add_argument("--epochs", type=int, default=5)
args = parser.parse_args()

torch.manual_seed(0)
features, targets = torch.randn(4096, 32) * 100, torch.randn(4096, 1) * 100
loader = DataLoader(TensorDataset(features, targets), batch_size=32, shuffle=True)
model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=args.lr)
for epoch in range(args.epochs):
    for x, y in loader:
        loss = nn.functional.mse_loss(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    print(f"epoch {epoch} loss {loss.item()}", flush=True)
