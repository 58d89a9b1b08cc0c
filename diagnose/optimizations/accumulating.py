"""Gradient accumulation inside an unchanged loop (the grad_accumulation experiment's runtime, in the variant's
process): the script calls step() every micro-batch; only every k-th goes through, and everything a loop does
around its step acts there too, as in a loop written to accumulate: zero_grad (the optimizer's or the model's),
a GradScaler's unscale_/step/update, gradient clipping, the LR scheduler's step. Any other order of these would
train differently from the effective batch the report recommends."""
from __future__ import annotations

import functools
import math
import sys
import types
import weakref
from typing import Optional


class Accumulating:
    """One optimizer whose step() goes through every k-th call (held weakly: its parameters' ids hold while it
    lives)."""

    def __init__(self, optimizer, k: int):
        self.optimizer, self.k, self.calls = weakref.ref(optimizer), k, 0
        self.owned = {id(p) for group in optimizer.param_groups for p in group["params"]}
        self.scalers: set[int] = set()  # the GradScalers that stepped it
        self.taking = False  # inside the real step (a GradScaler's step called from it is the real one)

    def alive(self) -> bool:
        return self.optimizer() is not None

    def waiting(self) -> bool:
        """Gradients of some micro-batches wait for a step."""
        return self.calls % self.k != 0 and self.alive()

    def holding(self) -> bool:
        """The script's zero_grad must not clear the gradients now: they wait, or the real step is being taken."""
        return self.waiting() or (self.taking and self.alive())

    def steps(self) -> int:
        return self.calls // self.k

    def final(self) -> bool:
        """The micro-batch now running is its step's last: its step() call is (or is being) the real one."""
        return self.taking or (self.calls + 1) % self.k == 0

    def owns(self, parameters) -> bool:
        return any(id(p) in self.owned for p in parameters)


ACCUMULATING: list[Accumulating] = []  # in this process


def every_kth_step(optimizer, k: int) -> None:
    """Hold the optimizer's step and zero_grad to every k-th micro-batch (zero_grad: before the first, as in
    zero_grad-backward-step, or right after a real step, as in backward-step-zero_grad). Bound as methods: an
    LRScheduler made later wraps step.__func__."""
    step, zero_grad = optimizer.step, optimizer.zero_grad
    state = Accumulating(optimizer, k)

    def accumulated_step(opt, *args, **kwargs):
        if any(s.taking for s in ACCUMULATING if s is not state):  # an optimizer inside one that steps (ZeRO)
            return step(*args, **kwargs)
        if not state.final():  # its closure runs before the count moves: its zero_grad starts a step or waits
            result = _closure_only(args, kwargs)
            state.calls += 1
            return result
        state.calls += 1
        state.taking = True  # the real step; a closure it runs adds the last micro-batch to the waiting ones
        try:
            return step(*args, **kwargs)
        finally:
            state.taking = False

    def accumulated_zero_grad(opt, *args, **kwargs):
        return None if state.holding() else zero_grad(*args, **kwargs)

    optimizer.step = types.MethodType(accumulated_step, optimizer)
    optimizer.zero_grad = types.MethodType(accumulated_zero_grad, optimizer)
    ACCUMULATING.append(state)
    _hold_at_micro_batches()


def _closure_only(args: tuple, kwargs: dict):
    """A micro-batch's step without the update: a closure (Lightning passes one: forward and backward) still runs,
    as the real step would have run it."""
    closure = kwargs.get("closure", args[0] if args else None)
    if not callable(closure):
        return None
    import torch

    with torch.enable_grad():
        return closure()


def state_of(optimizer) -> Optional[Accumulating]:
    if optimizer is None:
        return None
    return next((s for s in ACCUMULATING if s.optimizer() is optimizer), None)


def _mid_step(parameters) -> bool:
    """Whether these parameters belong to an optimizer whose step this micro-batch is not."""
    return any(not s.final() and s.owns(parameters) for s in ACCUMULATING if s.alive())


def _hold_at_micro_batches() -> None:
    """Once a process: wrap what a loop calls around its step."""
    import torch

    if getattr(torch.nn.Module.zero_grad, "holds_accumulation", False):
        return
    _wrap(torch.nn.Module, "zero_grad", _module_zero_grad)
    for scaler in _scaler_classes(torch):
        for name, replacement in (("unscale_", _scaler_unscale), ("step", _scaler_step), ("update", _scaler_update)):
            if name in vars(scaler):  # a subclass that overrides it (FSDP's ShardedGradScaler)
                _wrap(scaler, name, replacement)
    for scheduler in _scheduler_classes(torch.optim.lr_scheduler.LRScheduler):
        _wrap(scheduler, "step", _scheduler_step)
    from torch.nn.utils import clip_grad

    if hasattr(clip_grad, "_clip_grads_with_norm_"):  # torch >= 2.6: reached however the script named the function
        _wrap(clip_grad, "_clip_grads_with_norm_", _clip_with_norm)
    else:
        _wrap(torch.nn.utils, "clip_grad_norm_", _clip_grad_norm)


def _scaler_classes(torch) -> list[type]:
    """torch.amp.GradScaler (torch >= 2.3; torch.cuda.amp's before), and FSDP's when the script loaded it."""
    found = [getattr(torch.amp, "GradScaler", None) or torch.cuda.amp.GradScaler]
    sharded = sys.modules.get("torch.distributed.fsdp.sharded_grad_scaler")
    if sharded is not None and hasattr(sharded, "ShardedGradScaler"):
        found.append(sharded.ShardedGradScaler)
    return found


def _scheduler_classes(base: type) -> list[type]:
    """LRScheduler and its subclasses that define their own step() (SequentialLR, ReduceLROnPlateau, ...)."""
    found, pending = [base], list(base.__subclasses__())
    while pending:
        cls = pending.pop()
        if "step" in vars(cls):
            found.append(cls)
        pending.extend(cls.__subclasses__())
    return found


def _wrap(owner, name: str, replacement) -> None:
    original = getattr(owner, name)

    @functools.wraps(original)
    def wrapper(*args, **kwargs):
        return replacement(original, *args, **kwargs)

    wrapper.holds_accumulation = True
    setattr(owner, name, wrapper)


def _module_zero_grad(original, module, *args, **kwargs):
    """model.zero_grad() (nanoGPT, many tutorials) passes over the parameters whose gradients wait for a step."""
    if any(s.holding() and s.owns(module.parameters()) for s in ACCUMULATING):
        return None
    return original(module, *args, **kwargs)


def _scaler_unscale(original, scaler, optimizer):
    state = state_of(optimizer)
    return None if state is not None and not state.final() else original(scaler, optimizer)


def _scaler_step(original, scaler, optimizer, *args, **kwargs):
    """A micro-batch that is not its step's last counts its step() call and leaves the gradients scaled (the
    next backward adds to them at the same scale)."""
    state = state_of(optimizer)
    if state is None:
        return original(scaler, optimizer, *args, **kwargs)
    state.scalers.add(id(scaler))
    if not state.final():
        return optimizer.step(*args, **kwargs)  # the accumulating step(): counted, not taken
    calls = state.calls
    result = original(scaler, optimizer, *args, **kwargs)
    if not state.taking and state.calls == calls:  # inf or NaN gradients: the scaler skipped the step; the
        state.calls += 1  # next micro-batches start a new one, as the loop zeroes these
    return result


def _scaler_update(original, scaler, *args, **kwargs):
    """update() follows the steps that checked for inf gradients; after a micro-batch's counted step none did.
    A new scale the script sets itself is set."""
    if (not args and kwargs.get("new_scale") is None and any(id(scaler) in s.scalers for s in ACCUMULATING)
            and not _inf_checks_recorded(scaler)):
        return None
    return original(scaler, *args, **kwargs)


def _inf_checks_recorded(scaler) -> bool:
    states = getattr(scaler, "_per_optimizer_states", None)
    if states is None or not scaler.is_enabled():
        return True  # not torch's layout, or nothing to check: update() as the script asks
    return any(state.get("found_inf_per_device") for state in states.values())


_SCHEDULER_CALLS = {"depth": 0}  # scheduler steps in progress: a scheduler's own calls to others pass


def _scheduler_step(original, scheduler, *args, **kwargs):
    """The schedule advances at most once an optimizer step, as in the loop that accumulates (not once a
    micro-batch): a call goes through when the optimizer has taken a real step since the scheduler's last (a
    scheduler stepped once an epoch still steps when the epoch ends inside a step). A scheduler's first call, its
    initial step (torch's _is_initial) and the calls one scheduler makes to others (SequentialLR, a subclass's
    super().step()) always do; a scheduler first seen inside a step (SequentialLR makes no initial step) counts
    from that step."""
    state = state_of(getattr(scheduler, "optimizer", None))
    passes = state is None or _SCHEDULER_CALLS["depth"] or getattr(scheduler, "_is_initial", False)
    if not passes:
        seen = getattr(scheduler, "_diagnose_optimizer_steps", None)
        if seen is None:
            seen = state.steps() if state.waiting() else -1
        if seen == state.steps():
            scheduler._diagnose_optimizer_steps = seen
            return None
    if state is not None:
        scheduler._diagnose_optimizer_steps = state.steps()
    _SCHEDULER_CALLS["depth"] += 1
    try:
        return original(scheduler, *args, **kwargs)
    finally:
        _SCHEDULER_CALLS["depth"] -= 1


def _clip_with_norm(original, parameters, *args, **kwargs):
    """clip_grad_norm_'s second half: its norm computed and returned (a loop may log it), the clipping of a
    micro-batch's partial sum left for the step's last micro-batch (it would change the step)."""
    return None if _mid_step(parameters) else original(parameters, *args, **kwargs)


def _clip_grad_norm(original, parameters, max_norm, *args, **kwargs):
    """torch < 2.6: the same, by clipping to an infinite norm."""
    import torch

    parameters = [parameters] if isinstance(parameters, torch.Tensor) else list(parameters)
    return original(parameters, math.inf if _mid_step(parameters) else max_norm, *args, **kwargs)
