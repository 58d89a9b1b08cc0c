"""Gradient accumulation applied to an unchanged loop: k micro-batches make one optimizer step equal to the
step of the whole batch, whichever order the loop calls zero_grad() in and on the optimizer or the model (real
torch, a Linear layer, SGD)."""
from __future__ import annotations

import pytest
import torch

from diagnose.optimizations.grad_accumulation import _every_kth_step


def _trained(order: str, micro_batches: int, zeroes: str = "optimizer") -> torch.Tensor:
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    x, y = torch.randn(8, 3), torch.randn(8, 1)
    if micro_batches > 1:
        _every_kth_step(optimizer, micro_batches)
    zero_grad = optimizer.zero_grad if zeroes == "optimizer" else model.zero_grad
    size = 8 // micro_batches
    for _ in range(2):  # two optimizer steps' worth of batches: the second must not see the first's gradients
        for i in range(micro_batches):
            xb, yb = x[i * size:(i + 1) * size], y[i * size:(i + 1) * size]
            if order == "zero first":
                zero_grad()
            (torch.nn.functional.mse_loss(model(xb), yb) / micro_batches).backward()
            optimizer.step()
            if order == "zero last":
                zero_grad()
    return torch.cat([p.detach().flatten() for p in model.parameters()])


@pytest.mark.parametrize("zeroes", ["optimizer", "model"])
@pytest.mark.parametrize("order", ["zero first", "zero last"])
def test_four_micro_batches_step_as_the_whole_batch_does(order, zeroes):
    whole = _trained(order, 1, zeroes)
    assert torch.allclose(_trained(order, 4, zeroes), whole, atol=1e-6)


def test_a_model_the_optimizer_does_not_train_still_zeroes_its_gradients():
    """Only the accumulating optimizer's parameters keep their gradients: another model (a frozen teacher, a
    discriminator with its own optimizer) zeroes as its loop asks."""
    trained, other = torch.nn.Linear(3, 1), torch.nn.Linear(3, 1)
    optimizer = torch.optim.SGD(trained.parameters(), lr=0.1)
    _every_kth_step(optimizer, 4)
    for model in (trained, other):
        model(torch.randn(2, 3)).sum().backward()
    optimizer.step()  # one micro-batch of four in: the trained model's gradients wait for the others
    trained.zero_grad()
    other.zero_grad()
    assert all(p.grad is not None for p in trained.parameters())
    assert all(p.grad is None for p in other.parameters())
