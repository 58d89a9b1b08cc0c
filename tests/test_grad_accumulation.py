"""Gradient accumulation applied to an unchanged loop: k micro-batches make one optimizer step equal to the
step of the whole batch, whichever order the loop calls zero_grad() in and on the optimizer or the model (real
torch, a Linear layer, SGD)."""
from __future__ import annotations

import pytest
import torch
from torch.nn.utils import clip_grad_norm_

from diagnose.optimizations import accumulating
from diagnose.optimizations.accumulating import every_kth_step
from diagnose.optimizations.amp import _scaled_step


@pytest.fixture(autouse=True)
def _one_training_per_test():
    """A variant's process trains once; here each test is one such training (the hooks on torch stay)."""
    yield
    accumulating.ACCUMULATING.clear()


def _trained(order: str, micro_batches: int, zeroes: str = "optimizer") -> torch.Tensor:
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    x, y = torch.randn(8, 3), torch.randn(8, 1)
    if micro_batches > 1:
        every_kth_step(optimizer, micro_batches)
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
    every_kth_step(optimizer, 4)
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
        every_kth_step(optimizer, micro_batches)
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
    every_kth_step(optimizer, 2)
    before = model.weight.detach().clone()
    for batch in (torch.full((2, 3), float("inf")), torch.ones(2, 3)):  # one step of two micro-batches each
        for _ in range(2):
            optimizer.zero_grad()
            scaler.scale(model(batch).sum() / 2).backward()
            scaler.step(optimizer)
            scaler.update()
    assert torch.isfinite(model.weight).all() and scaler.get_scale() == 2.0 ** 9  # one skip, then a real step
    assert not torch.equal(model.weight, before)


def _schedule(optimizer, kind: str):
    if kind == "sequential":  # overrides step() and steps schedulers of its own
        return torch.optim.lr_scheduler.SequentialLR(optimizer, [
            torch.optim.lr_scheduler.ConstantLR(optimizer, factor=0.5, total_iters=1),
            torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)], milestones=[2])
    return torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)


def _trained_with(micro_batches: int, hooks: list[str], kind: str = "step") -> torch.Tensor:
    """A plain loop with an LR scheduler made after the optimizer (it wraps step.__func__), the hooks of the
    experiments given applied in that order, as a combination of winners applies them."""
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0 ** 10, growth_interval=1)
    for hook in hooks:
        every_kth_step(optimizer, micro_batches) if hook == "accumulate" else _scaled_step(optimizer, scaler)
    schedule = _schedule(optimizer, kind)
    x, y = torch.randn(8, 3), torch.randn(8, 1)
    size = 8 // micro_batches
    for _ in range(3):
        for i in range(micro_batches):
            loss = torch.nn.functional.mse_loss(model(x[i * size:(i + 1) * size]), y[i * size:(i + 1) * size])
            loss = loss / micro_batches
            (scaler.scale(loss) if "amp" in hooks else loss).backward()
            optimizer.step()
            optimizer.zero_grad()
            schedule.step()
    return torch.cat([p.detach().flatten() for p in model.parameters()] + [torch.tensor(schedule.get_last_lr())])


@pytest.mark.parametrize("hooks, kind", [(["accumulate"], "step"), (["accumulate", "amp"], "step"),
                                         (["amp", "accumulate"], "step"), (["accumulate"], "sequential")])
def test_with_a_scheduler_and_mixed_precision_in_either_order_micro_batches_step_as_the_whole_batch(hooks, kind):
    """The schedule advances once an optimizer step; amp's scaled step inside or outside the accumulation."""
    whole = _trained_with(1, [h for h in hooks if h != "accumulate"], kind)
    assert torch.allclose(_trained_with(4, hooks, kind), whole, atol=1e-5)


def test_a_scheduler_stepped_once_an_epoch_steps_when_the_epoch_ends_inside_a_step():
    model = torch.nn.Linear(3, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=1.0)
    every_kth_step(optimizer, 2)
    schedule = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)
    for _ in range(3):  # epochs of three micro-batches: two of them end inside an optimizer step
        for _ in range(3):
            model(torch.ones(1, 3)).sum().backward()
            optimizer.step()
            optimizer.zero_grad()
        schedule.step()
    assert schedule.get_last_lr() == [0.125]
    optimizer.step()  # a step's first micro-batch: a scheduler made now still starts as it would plainly
    assert torch.optim.lr_scheduler.StepLR(optimizer, step_size=1).get_last_lr() == [0.125]


def test_a_closure_passed_to_step_runs_at_every_micro_batch():
    """Lightning passes its forward and backward as step()'s closure: a micro-batch must still run them."""
    model = torch.nn.Linear(3, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    every_kth_step(optimizer, 2)
    ran = []

    def closure():
        ran.append(1)
        loss = model(torch.ones(1, 3)).sum()
        loss.backward()
        return loss

    for _ in range(4):
        assert optimizer.step(closure) is not None
    assert len(ran) == 4


def _trained_by_closure(micro_batches: int) -> torch.Tensor:
    """Lightning's way: step(closure), the closure zeroing, then forward and backward."""
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    if micro_batches > 1:
        every_kth_step(optimizer, micro_batches)
    x, y = torch.randn(8, 3), torch.randn(8, 1)
    size = 8 // micro_batches
    for _ in range(3):
        for i in range(micro_batches):
            def closure(i=i):
                optimizer.zero_grad()
                out = model(x[i * size:(i + 1) * size])
                loss = torch.nn.functional.mse_loss(out, y[i * size:(i + 1) * size]) / micro_batches
                loss.backward()
                return loss
            optimizer.step(closure)
    return torch.cat([p.detach().flatten() for p in model.parameters()])


def test_a_closure_that_zeroes_the_gradients_still_steps_as_the_whole_batch():
    assert torch.allclose(_trained_by_closure(4), _trained_by_closure(1), atol=1e-6)
