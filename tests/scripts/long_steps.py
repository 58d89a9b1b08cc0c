"""Three long optimizer steps: full-batch L-BFGS with 20 closure calls per step, each a forward and backward
through a wide layer plus 0.1 s of host work (a stand-in for a large model's step), about 2.5 s per step."""
import time

import torch

torch.manual_seed(0)
torch.set_num_threads(1)
x, y = torch.randn(1024, 512), torch.randn(1024, 1)
model = torch.nn.Sequential(torch.nn.Linear(512, 512), torch.nn.Tanh(), torch.nn.Linear(512, 1))
optimizer = torch.optim.LBFGS(model.parameters(), lr=0.1, max_iter=20, history_size=5,
                              tolerance_grad=0, tolerance_change=0)  # always 20 closure calls per step


def closure():
    optimizer.zero_grad()
    loss = torch.nn.functional.mse_loss(model(x), y)
    loss.backward()
    time.sleep(0.1)
    return loss


for step in range(3):
    start = time.monotonic()
    loss = optimizer.step(closure)
    print(f"step {step}: loss {loss.item():.4f}, {time.monotonic() - start:.1f} s", flush=True)
