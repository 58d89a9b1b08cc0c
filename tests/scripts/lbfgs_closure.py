"""Full-batch L-BFGS: optimizer.step(closure) runs the closure (forward and backward) up to max_iter times per
step, so one training step is one optimizer step, not one backward()."""
import torch

torch.manual_seed(0)
x, y = torch.randn(512, 16), torch.randn(512, 1)
model = torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.Tanh(), torch.nn.Linear(64, 1))
optimizer = torch.optim.LBFGS(model.parameters(), lr=0.1, max_iter=5, history_size=5,
                              tolerance_grad=0, tolerance_change=0)  # always 5 closure calls per step
calls = 0


def closure():
    global calls
    calls += 1
    optimizer.zero_grad()
    loss = torch.nn.functional.mse_loss(model(x), y)
    loss.backward()
    return loss


for step in range(200):
    optimizer.step(closure)
    if step == 0:
        print(f"closure calls in the first step: {calls}", flush=True)
