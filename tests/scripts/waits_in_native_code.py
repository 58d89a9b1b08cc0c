"""Fixture: a training loop whose 9th step (from 0, step 8) waits in native code for ever, as a collective whose peer
never joins or a hung device sync does: a torch future that nothing completes. Its wait never returns to Python, so
no signal handler can stop it (issue 45)."""
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


def wait_for_the_result(future):
    future.wait()  # C++ waits on a condition nothing signals


torch.manual_seed(0)
loader = DataLoader(TensorDataset(torch.randn(2048, 16), torch.randn(2048, 1)), batch_size=16)
model = nn.Linear(16, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
for step, (x, y) in enumerate(loader):
    loss = nn.functional.mse_loss(model(x), y)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    if step == 8:
        wait_for_the_result(torch.futures.Future())
