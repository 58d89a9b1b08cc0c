"""Fixture: 16 training steps, then an evaluation loop of 2000 single-sample forwards with .item() each.
The profiler, still running, records the evaluation too; per-step figures must count only the training steps."""
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)
loader = DataLoader(TensorDataset(torch.randn(512, 16), torch.randint(0, 4, (512,))), batch_size=32)
model = nn.Linear(16, 4)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for x, y in loader:
    opt.zero_grad()
    nn.functional.cross_entropy(model(x), y).backward()
    opt.step()
total = 0.0
for i in range(2000):  # evaluation after training: must not count per training step
    total += model(torch.randn(1, 16)).sum().item()
