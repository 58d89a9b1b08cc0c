"""Gradient accumulation applied to an unchanged loop: k micro-batches make one optimizer step equal to the
step of the whole batch, whichever order the loop calls zero_grad() in and on the optimizer or the model (real
torch, a Linear layer, SGD)."""
from __future__ import annotations

import pytest
import torch
from torch.nn.utils import clip_grad_norm_

from diagnose.optimizations import grad_accumulation
from diagnose.optimizations.grad_accumulation import _every_kth_step


@pytest.fixture(autouse=True)
def _one_training_per_test():
    """A variant's process trains once; here each test is one such training (the hooks on torch stay)."""
    yield
    grad_accumulation._ACCUMULATING.clear()


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


def _trained_scaled(micro_batches: int, clip: float) -> torch.Tensor:
    """The usual mixed-precision loop: scale, backward, unscale_, clip, scaler.step, update, zero_grad, with a
    scale that grows after every step (a scale mixed within a step would show)."""
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0 ** 10, growth_interval=1)
    x, y = torch.randn(8, 3), torch.randn(8, 1)
    if micro_batches > 1:
        _every_kth_step(optimizer, micro_batches)
    size = 8 // micro_batches
    norms = []
    for _ in range(3):
        for i in range(micro_batches):
            xb, yb = x[i * size:(i + 1) * size], y[i * size:(i + 1) * size]
            scaler.scale(torch.nn.functional.mse_loss(model(xb), yb) / micro_batches).backward()
            scaler.unscale_(optimizer)
            norms.append(float(clip_grad_norm_(model.parameters(), clip)))  # bound before the experiment's hooks
            scaler.step(optimizer)
            scaler.update()
            optimizer.zero_grad()
    assert all(n == n for n in norms)  # the norm is returned at every micro-batch (loops log it)
    return torch.cat([p.detach().flatten() for p in model.parameters()] + [torch.tensor([scaler.get_scale()])])


@pytest.mark.parametrize("clip", [0.05, 100.0])
def test_with_a_grad_scaler_and_clipping_four_micro_batches_step_as_the_whole_batch_does(clip):
    """unscale_, clip_grad_norm_ and update act once per optimizer step, on the whole step's gradients."""
    assert torch.allclose(_trained_scaled(4, clip), _trained_scaled(1, clip), atol=1e-5)


def test_a_step_the_scaler_skips_for_inf_gradients_starts_the_next_step_afresh():
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0 ** 10)
    _every_kth_step(optimizer, 2)
    for batch in (torch.full((2, 3), float("inf")), torch.ones(2, 3)):  # one step of two micro-batches each
        for _ in range(2):
            optimizer.zero_grad()
            scaler.scale(model(batch).sum() / 2).backward()
            scaler.step(optimizer)
            scaler.update()
    assert torch.isfinite(model.weight).all() and scaler.get_scale() == 2.0 ** 9  # one skip, then a real step
