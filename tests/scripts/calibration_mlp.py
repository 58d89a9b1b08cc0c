"""A compute-bound MLP (512-1024-1024-10, AdamW, an in-memory TensorDataset, batch 256, no workers): most of its
step is matrix products near their roof, and the optimizer's update, which does not grow with the batch, is most
of the rest. --width 1536 makes a model with about twice the FLOPs (compare's held-out pair)."""
import argparse

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

parser = argparse.ArgumentParser()
parser.add_argument("--batch-size", type=int, default=256)
parser.add_argument("--width", type=int, default=1024)
parser.add_argument("--epochs", type=int, default=3)
parser.add_argument("--items", type=int, default=65536)  # 8 steps an epoch at 32768: room for 16x the batch
args = parser.parse_args()

torch.manual_seed(0)
features = torch.randn(args.items, 512)
labels = torch.randint(0, 10, (args.items,))
loader = DataLoader(TensorDataset(features, labels), batch_size=args.batch_size, shuffle=True)
model = nn.Sequential(nn.Linear(512, args.width), nn.ReLU(), nn.Linear(args.width, args.width), nn.ReLU(),
                      nn.Linear(args.width, 10))
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)

for epoch in range(args.epochs):
    for x, y in loader:
        loss = nn.functional.cross_entropy(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    print(f"epoch {epoch} loss {loss.item():.4f}", flush=True)
