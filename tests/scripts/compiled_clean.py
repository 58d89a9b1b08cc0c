"""Fixture: a compiled MLP with no graph break and inputs of one shape, trained for long enough (200 epochs) that
compiling is a small part of the run: no compile finding is due."""
import torch
from torch.utils.data import DataLoader, TensorDataset


def main():
    torch.set_num_threads(1)
    torch.manual_seed(0)
    data = TensorDataset(torch.randn(16384, 64), torch.randint(0, 10, (16384,)))
    model = torch.compile(torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.GELU(), torch.nn.Linear(256, 10)))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    for epoch in range(200):
        for x, y in DataLoader(data, batch_size=64, shuffle=True, drop_last=True):
            loss = torch.nn.functional.cross_entropy(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()


if __name__ == "__main__":
    main()
