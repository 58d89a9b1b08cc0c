"""Gradient accumulation: micro-batches of half the size, two backward passes per optimizer step, the same
effective batch, less activation memory. Reported with the memory it saved and the time it cost. Where the
largest batch that fits was measured (a run out of memory), the fewest micro-batches whose size fits it."""
from __future__ import annotations

import functools
import math
import weakref
from typing import Optional

from diagnose.optimizations.base import APPROXIMATE, Context, Optimization
from diagnose.optimizations.registry import register

MICRO_BATCHES = 2


@register
class GradAccumulation(Optimization):
    id = "grad_accumulation"
    title = "Gradient accumulation"
    fidelity = APPROXIMATE  # same effective batch; batch-norm statistics see smaller batches
    metric = "samples/s"
    site = "loader"
    snippet_too = True  # a smaller batch alone would change the effective batch: the loop is the other half

    def skip_reason(self, ctx: Context):
        loader = ctx.loader
        if loader is None or not loader.batch_size or loader.batch_size < 2 * MICRO_BATCHES:
            return "needs a DataLoader with a batch size of at least 4 to split into micro-batches"
        if not ctx.capture.optimizers:
            return "needs a torch.optim optimizer"
        return None

    def settings(self, ctx):
        """Two micro-batches; where the largest batch that fits was measured, the fewest micro-batches that fit
        it and twice as many (more headroom, for the time it costs): the faster that fits wins."""
        size = ctx.loader.batch_size
        # a loop that accumulates already: a framework's setting replaces its count, so it says the product
        accumulating = ctx.capture.micro_batches_per_step
        already = {"accumulating": accumulating} if accumulating > 1 else {}
        if not ctx.largest_batch or ctx.largest_batch >= size:  # the batch fits: halve it, as to save memory
            return [{"micro_batches": MICRO_BATCHES, "batch_size": size // MICRO_BATCHES, **already}]
        fewest = micro_batches_to_fit(size, ctx.largest_batch)
        counts = [fewest] + ([micro_batches_to_fit(size, size // fewest // 2)] if size // fewest >= 4 else [])
        return [{"micro_batches": k, "batch_size": size // k, **already} for k in dict.fromkeys(counts)]

    def apply(self, setting, changes):
        k = setting["micro_batches"]

        def smaller_batches(args: dict) -> None:
            if args.get("batch_sampler") is None:  # see batch_size: accelerate re-makes the loader from its sampler
                args["batch_size"] = setting["batch_size"]

        changes.loader_edits.append(smaller_batches)
        changes.loss_transforms.append(lambda loss: loss / k)
        changes.optimizer_hooks.append(lambda opt: _every_kth_step(opt, k))
        changes.applied.append(f"batch_size={setting['batch_size']} x {k} micro-batches per optimizer step")

    def keyword_edits(self, setting):
        return {"batch_size": str(setting["batch_size"])}

    def snippet(self, setting, ctx):
        k = setting["micro_batches"]
        return (f"for i, (x, y) in enumerate(loader):  # batch_size={setting['batch_size']}\n"
                f"    (loss_fn(model(x), y) / {k}).backward()\n"
                f"    if (i + 1) % {k} == 0:\n"
                "        optimizer.step()\n        optimizer.zero_grad()")


def micro_batches_to_fit(batch: int, largest: int) -> int:
    """The fewest micro-batches (at least two) of at most `largest` samples that make up `batch` exactly, so the
    effective batch stays the same; when no divisor gives that, the fewest that fit (the effective batch then
    loses the remainder)."""
    fewest = max(MICRO_BATCHES, -(-batch // max(1, largest)))
    exact = [k for k in range(fewest, batch + 1) if batch % k == 0]
    return exact[0] if exact and exact[0] <= 2 * fewest else fewest


class _Accumulating:
    """One optimizer whose step() goes through every k-th call (held weakly: its parameters' ids hold while it
    lives)."""

    def __init__(self, optimizer, k: int):
        self.optimizer, self.k, self.calls = weakref.ref(optimizer), k, 0
        self.owned = {id(p) for group in optimizer.param_groups for p in group["params"]}
        self.scalers: set[int] = set()  # the GradScalers that stepped it (their update() waits for its step)

    def waiting(self) -> bool:
        """Gradients of some micro-batches wait for a step (the script's zero_grad must not clear them)."""
        return self.calls % self.k != 0 and self.optimizer() is not None

    def steps_next(self) -> bool:
        """The next step() call is a real one: the micro-batch now running is its step's last."""
        return (self.calls + 1) % self.k == 0

    def owns(self, parameters) -> bool:
        return any(id(p) in self.owned for p in parameters)


_ACCUMULATING: list[_Accumulating] = []  # in this process (the variant's)


def _every_kth_step(optimizer, k: int) -> None:
    """The script calls step() and zero_grad() every batch; only every k-th step() goes through, and zero_grad()
    only where no micro-batch's gradients wait for a step: before the first (zero_grad, backward, step) or right
    after a real step (backward, step, zero_grad), whichever order the script uses, and whether it zeroes through
    the optimizer or the model (model.zero_grad(): nanoGPT, many tutorials). A GradScaler's unscale_, step and
    update, and gradient clipping, act at the real step only, as in a loop written to accumulate."""
    step, zero_grad = optimizer.step, optimizer.zero_grad
    state = _Accumulating(optimizer, k)

    def accumulated_step(*args, **kwargs):
        state.calls += 1
        return None if state.waiting() else step(*args, **kwargs)

    def accumulated_zero_grad(*args, **kwargs):
        return None if state.waiting() else zero_grad(*args, **kwargs)

    optimizer.step, optimizer.zero_grad = accumulated_step, accumulated_zero_grad
    _ACCUMULATING.append(state)
    _hold_at_micro_batches()


def _state_of(optimizer) -> Optional[_Accumulating]:
    return next((s for s in _ACCUMULATING if s.optimizer() is optimizer), None)


def _mid_step(parameters) -> bool:
    """Whether these parameters belong to an optimizer whose step this micro-batch is not."""
    return any(not s.steps_next() and s.owns(parameters) for s in _ACCUMULATING if s.optimizer() is not None)


def _hold_at_micro_batches() -> None:
    """Once a process: Module.zero_grad, GradScaler's unscale_/step/update and clip_grad_norm_ pass over the
    gradients an accumulating optimizer has waiting."""
    import torch

    if getattr(torch.nn.Module.zero_grad, "holds_accumulation", False):
        return
    _wrap(torch.nn.Module, "zero_grad",
          lambda original, module, *a, **kw: None if any(s.waiting() and s.owns(module.parameters())
                                                         for s in _ACCUMULATING) else original(module, *a, **kw))
    _wrap(torch.amp.GradScaler, "unscale_", _scaler_unscale)
    _wrap(torch.amp.GradScaler, "step", _scaler_step)
    _wrap(torch.amp.GradScaler, "update",
          lambda original, scaler, *a, **kw: None if any(s.waiting() and id(scaler) in s.scalers
                                                         for s in _ACCUMULATING) else original(scaler, *a, **kw))
    from torch.nn.utils import clip_grad

    if hasattr(clip_grad, "_clip_grads_with_norm_"):  # torch >= 2.6: reached however the script named the function
        _wrap(clip_grad, "_clip_grads_with_norm_", _clip_with_norm)
    else:
        _wrap(torch.nn.utils, "clip_grad_norm_", _clip_grad_norm)


def _wrap(owner, name: str, replacement) -> None:
    original = getattr(owner, name)

    @functools.wraps(original)
    def wrapper(*args, **kwargs):
        return replacement(original, *args, **kwargs)

    wrapper.holds_accumulation = True
    setattr(owner, name, wrapper)


def _scaler_unscale(original, scaler, optimizer):
    state = _state_of(optimizer)
    return None if state is not None and not state.steps_next() else original(scaler, optimizer)


def _scaler_step(original, scaler, optimizer, *args, **kwargs):
    """A micro-batch that is not its step's last counts its step() call and leaves the gradients scaled (the
    next backward adds to them at the same scale)."""
    state = _state_of(optimizer)
    if state is not None:
        state.scalers.add(id(scaler))
    if state is not None and not state.steps_next():
        return optimizer.step(*args, **kwargs)  # the accumulating step(): counted, not taken
    calls = state.calls if state is not None else None
    result = original(scaler, optimizer, *args, **kwargs)
    if state is not None and state.calls == calls:  # inf or NaN gradients: the scaler skipped the step; the
        state.calls += 1  # next micro-batches start a new one, as the loop zeroes these
    return result


def _clip_with_norm(original, parameters, *args, **kwargs):
    """clip_grad_norm_'s second half: its norm computed and returned (a loop may log it), the clipping of a
    micro-batch's partial sum left for the step's last micro-batch (it would change the step)."""
    return None if _mid_step(parameters) else original(parameters, *args, **kwargs)


def _clip_grad_norm(original, parameters, max_norm, *args, **kwargs):
    """Clipping a micro-batch's partial sum would change the step: the norm is computed and returned (a loop may
    log it), the gradients left whole until the step's last micro-batch."""
    import torch

    parameters = [parameters] if isinstance(parameters, torch.Tensor) else list(parameters)
    return original(parameters, math.inf if _mid_step(parameters) else max_norm, *args, **kwargs)
