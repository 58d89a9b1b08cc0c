"""A small training loop for the CI gate's tests: LAYERS equal blocks (Linear 256-256 and ReLU) on an in-memory
batch, SGD. A copy with LAYERS = 21 does 5% more work per step (every block's forward, backward and update); the
gate's power test compares the two, its false-alarm test the script with itself.

One thread: a 2-core CI machine's other core is never quite idle, and a two-thread matrix product waits for the
slower thread at every barrier, where one thread only slows by the time it loses itself."""
import argparse

import torch
from torch import nn

LAYERS = 20

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=100_000)
parser.add_argument("--batch-size", type=int, default=64)
args = parser.parse_args()

torch.set_num_threads(1)
torch.manual_seed(0)
model = nn.Sequential(*(block for _ in range(LAYERS) for block in (nn.Linear(256, 256), nn.ReLU())))
optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
x, y = torch.randn(args.batch_size, 256), torch.randn(args.batch_size, 256)

for step in range(args.steps):
    loss = nn.functional.mse_loss(model(x), y)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
