"""Fixture: a small MLP trained through torch.compile, as nanoGPT does by default (compile=True): the first
step compiles (tens of seconds with an empty inductor cache), the rest run the compiled code. No graph break, one
input shape: with --epochs 2000, compiling is a small part of the run."""
import argparse

import torch
from torch.utils.data import DataLoader, TensorDataset


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=20)
    args = parser.parse_args()
    torch.manual_seed(0)
    data = TensorDataset(torch.randn(16384, 64), torch.randint(0, 10, (16384,)))
    model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.GELU(), torch.nn.Linear(256, 10))
    model = torch.compile(model)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    for epoch in range(args.epochs):
        for x, y in DataLoader(data, batch_size=64, shuffle=True):
            loss = torch.nn.functional.cross_entropy(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()


if __name__ == "__main__":
    main()
