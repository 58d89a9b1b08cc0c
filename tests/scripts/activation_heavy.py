"""A model whose activations are wide and cheap: each sample's features are widened 16x by a copy, then pass
through elementwise layers that each keep their input for backward. Memory grows with the batch (about 0.1 MiB
a sample) while compute stays light, so the tests can run it out of memory under --memory-limit and time the
variants that make it fit in seconds (benchmarks/gpu_check.sh does the same on CUDA with --device cuda)."""
import argparse

import torch
from torch import nn


class Wide(nn.Module):
    def __init__(self, features: int, widen: int):
        super().__init__()
        self.inp = nn.Linear(512, features)
        self.widen = widen
        self.scale = nn.Parameter(torch.ones(features * widen))
        self.out = nn.Linear(features, 10)

    def forward(self, x):
        h = self.inp(x).repeat(1, self.widen) * self.scale  # wide: features x widen per sample
        h = torch.tanh(h)
        h = torch.sigmoid(h) * h
        h = torch.tanh(h)
        return self.out(h.view(h.shape[0], self.widen, -1).mean(1))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--samples", type=int, default=32768)
    parser.add_argument("--steps", type=int, default=400)
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()

    torch.manual_seed(0)
    torch.set_num_threads(1)
    data = torch.randn(args.samples, 512)
    labels = torch.randint(0, 10, (args.samples,))
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(data, labels), batch_size=args.batch_size,
                                         shuffle=True, drop_last=True)
    model = Wide(256, 16).to(args.device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    step = 0
    while step < args.steps:
        for x, y in loader:
            x, y = x.to(args.device), y.to(args.device)
            optimizer.zero_grad()
            nn.functional.cross_entropy(model(x), y).backward()
            optimizer.step()
            step += 1
            if step >= args.steps:
                break
    print("done", flush=True)


if __name__ == "__main__":
    main()
