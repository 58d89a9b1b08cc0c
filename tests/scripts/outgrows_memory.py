"""An MLP with AdamW whose activations grow with the batch: the tests compare the memory breakdown with the sizes
computed from the model, and run it under --memory-limit (where it fits at batch 256)."""
import argparse

import torch
from torch import nn


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--width", type=int, default=2048)
    parser.add_argument("--steps", type=int, default=200)
    args = parser.parse_args()

    torch.manual_seed(0)
    torch.set_num_threads(1)
    data = torch.randn(8192, 512)
    labels = torch.randint(0, 10, (8192,))
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(data, labels), batch_size=args.batch_size,
                                         shuffle=True, drop_last=True)
    model = nn.Sequential(nn.Linear(512, args.width), nn.ReLU(), nn.Linear(args.width, args.width), nn.ReLU(),
                          nn.Linear(args.width, 10))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    step = 0
    while step < args.steps:
        for x, y in loader:
            optimizer.zero_grad()
            nn.functional.cross_entropy(model(x), y).backward()
            optimizer.step()
            step += 1
    print("done", flush=True)


if __name__ == "__main__":
    main()
