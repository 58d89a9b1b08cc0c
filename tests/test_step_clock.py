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
    return seen, instr.steps.source


def test_each_closure_step_is_one_step():
    seen, source = _loop(0, 5)
    assert source == "optimizer" and len(seen) == 5


def test_closure_steps_after_plain_backward_calls_still_count():
    seen, source = _loop(2, 5)
    assert source == "optimizer"
    # the two plain backward() calls came before any optimizer step, with an optimizer built: not steps
    assert len(seen) == 5


def _accumulating(micro: int, steps: int, with_optimizer: bool = True) -> Instrumentation:
    seen: list[int] = []
    instr = Instrumentation(seen.append)
    instr.install()
    try:
        model = torch.nn.Linear(4, 1)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
        for _ in range(steps):
            for _ in range(micro):
                (model(torch.randn(8, 4)).square().mean() / micro).backward()
            if with_optimizer:
                optimizer.step()
                optimizer.zero_grad()
    finally:
        instr.uninstall()
    instr.seen_boundaries = seen
    return instr


def test_with_gradient_accumulation_a_step_is_an_optimizer_step():
    instr = _accumulating(micro=4, steps=6)
    # the first iteration's micro-batches come before any optimizer step: none counted; then one per iteration
    assert instr.seen_boundaries == [1, 2, 3, 4, 5] and instr.steps.micro_per_step == [4, 4, 4, 4]


def test_without_an_optimizer_step_each_backward_is_a_step_after_a_while():
    instr = _accumulating(micro=1, steps=70, with_optimizer=False)  # an optimizer built, never stepped
    assert len(instr.seen_boundaries) == 70 - instr.steps.MAX_UNSETTLED


def test_diagnose_step_marks_the_steps_while_instrumented_and_is_a_no_op_after():
    # a loop with no DataLoader, backward() or optimizer: the user's diagnose.step() calls are its steps
    import diagnose

    seen: list[int] = []
    instr = Instrumentation(seen.append)
    instr.install()
    try:
        for _ in range(4):
            diagnose.step()
            torch.ones(8).sum()
    finally:
        instr.uninstall()
    assert instr.steps.source == "manual" and len(seen) >= 3
    marked = len(seen)
    diagnose.step()  # outside the capture: nothing watches
    assert len(seen) == marked
