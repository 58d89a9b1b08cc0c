"""Compiled model with a graph break in every step: a data-dependent branch in forward.

The model is compiled with torch.compile, but its forward reads a value back to Python to decide a branch
(`if h.mean().item() > 0.0:`). Dynamo cannot trace a Python branch on a tensor's value: it ends the graph at
`.item()`, runs the comparison eagerly, and resumes in a second compiled graph. Every forward then pays for two
graphs instead of one, a device sync for the read-back, and eager code between them; the backward is split
the same way.

Typical fix: keep the decision on the tensor side, `h = torch.where(h.mean() > 0, h * 2, h)`, so the whole
forward is one graph (or torch.cond for branches that differ in more than a value).
"""
import argparse

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


class GatedMLP(nn.Module):
    def __init__(self, width=256):
        super().__init__()
        self.inp = nn.Linear(64, width)
        self.hidden = nn.Linear(width, width)
        self.out = nn.Linear(width, 10)

    def forward(self, x):
        h = torch.relu(self.inp(x))
        if h.mean().item() > 0.0:  # a data-dependent branch: dynamo breaks the graph here
            h = h * 2
        h = torch.relu(self.hidden(h))
        return self.out(h)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--num-items", type=int, default=16384)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()

    torch.set_num_threads(1)
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(0)
    data = TensorDataset(torch.randn(args.num_items, 64, generator=g),
                         torch.randint(0, 10, (args.num_items,), generator=g))
    loader = DataLoader(data, batch_size=args.batch_size, shuffle=True, drop_last=True)
    model = torch.compile(GatedMLP().to(args.device))
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    for epoch in range(args.epochs):
        for step, (x, y) in enumerate(loader):
            x, y = x.to(args.device), y.to(args.device)
            loss = nn.functional.cross_entropy(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            if step % 100 == 0:
                print(f"epoch {epoch} step {step} loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
