"""A hand-written loop trained twice from the same seed, 120 steps: plain, then inside diagnose.window. argv: RUN_DIR
and the trigger, "at" (step 100) or "slower" (from step 70 each step waits 50 ms more, as for a slow shard: the
window opens a few steps later). Prints both
final losses, the steps reached and the window's diagnosis."""
import json
import sys
import time

import torch

import diagnose

STEPS = 120
torch.set_num_threads(1)  # no op waits for a second thread that a loaded machine descheduled


def train(window=None, slow_from=None):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(STEPS, 256, 32), torch.randn(STEPS, 256, 1)
    for step in range(STEPS):
        if window is not None:
            window.step()
        if slow_from is not None and step >= slow_from:
            time.sleep(0.05)  # a slow shard
        loss = torch.nn.functional.mse_loss(model(x[step]), y[step])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return loss.item(), step


run_dir, trigger = sys.argv[1], sys.argv[2]
plain_loss, _ = train()
if trigger == "at":
    with diagnose.window(at_step=100, steps=5, out=run_dir) as window:
        window_loss, last = train(window)
else:
    with diagnose.window(when_slower=3.0, steps=5, out=run_dir) as window:
        window_loss, last = train(window, slow_from=70)
result = window.result(timeout=120)
print(json.dumps({"loss_plain": plain_loss, "loss_window": window_loss, "last_step": last,
                  "first_profiled": window.first_step, "steps_profiled": result.diagnosis.steps_profiled,
                  "verdict": result.verdict, "exit_code": result.exit_code}))
