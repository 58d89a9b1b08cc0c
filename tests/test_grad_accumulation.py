"""Gradient accumulation applied to an unchanged loop: k micro-batches make one optimizer step equal to the
step of the whole batch, whichever order the loop calls zero_grad() in (real torch, a Linear layer, SGD)."""
from __future__ import annotations

import pytest
import torch

from diagnose.optimizations.grad_accumulation import _every_kth_step


def _trained(order: str, micro_batches: int) -> torch.Tensor:
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    x, y = torch.randn(8, 3), torch.randn(8, 1)
    if micro_batches > 1:
        _every_kth_step(optimizer, micro_batches)
    size = 8 // micro_batches
    for _ in range(2):  # two optimizer steps' worth of batches: the second must not see the first's gradients
        for i in range(micro_batches):
            xb, yb = x[i * size:(i + 1) * size], y[i * size:(i + 1) * size]
            if order == "zero first":
                optimizer.zero_grad()
            (torch.nn.functional.mse_loss(model(xb), yb) / micro_batches).backward()
            optimizer.step()
            if order == "zero last":
                optimizer.zero_grad()
    return torch.cat([p.detach().flatten() for p in model.parameters()])


@pytest.mark.parametrize("order", ["zero first", "zero last"])
def test_four_micro_batches_step_as_the_whole_batch_does(order):
    whole = _trained(order, 1)
    assert torch.allclose(_trained(order, 4), whole, atol=1e-6)
