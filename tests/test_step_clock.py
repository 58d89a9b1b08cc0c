"""Step boundaries from real torch calls, in process: a closure's forward and backward passes belong to one
optimizer step, also when plain backward() calls came first (a pre-check, or Adam before L-BFGS)."""
from __future__ import annotations

import torch

from diagnose.capture.instrument import Instrumentation


def _loop(pre_backwards: int, steps: int) -> tuple[list[int], str]:
    seen: list[int] = []
    instr = Instrumentation(seen.append)
    instr.install()
    try:
        torch.manual_seed(0)
        model = torch.nn.Linear(4, 1)
        x, y = torch.randn(16, 4), torch.randn(16, 1)
        optimizer = torch.optim.LBFGS(model.parameters(), max_iter=4)

        def closure():
            optimizer.zero_grad()
            loss = torch.nn.functional.mse_loss(model(x), y)
            loss.backward()
            return loss

        for _ in range(pre_backwards):
            closure()  # e.g. a check of the loss before training, outside any optimizer step
        for _ in range(steps):
            optimizer.step(closure)
    finally:
        instr.uninstall()
    return seen, instr.clock.source


def test_each_closure_step_is_one_step():
    seen, source = _loop(0, 5)
    assert source == "optimizer" and len(seen) == 5


def test_closure_steps_after_plain_backward_calls_still_count():
    seen, source = _loop(2, 5)
    assert source == "optimizer"
    assert len(seen) == 2 + 5  # the two plain backward() calls, then one boundary per optimizer step
