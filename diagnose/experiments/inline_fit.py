"""Gradient accumulation for a loop with no DataLoader to change (batches made inline: `torch.randn(b, ...)`,
nanoGPT's get_batch()). No variant can be run, but the numbers can still be given: the micro-batch size and count
that fit, from what the run that ran out of memory measured and the limit, written as the change to make and
marked not verified.

The estimate: what was in use when it ran out plus what it asked for is a floor of the step's need at the
script's batch; less what counted before the script began and the model's own tensors (parameters, their
gradients, the optimizer's state), the rest grows with the batch. It is a floor, so the bytes a sample are too;
one that failed before backward saw at most the forward's half (backward holds the activations' gradients beside
the activations: under --memory-limit 700MB an MLP that failed in forward at 131072 with 6.4 KiB a sample seen
ran out in backward at 65536, and fits at 32768), so it counts twice. The count is the fewest that fit with the
margin, and the note says that it was not run."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from diagnose.experiments.batch_search import MARGIN
from diagnose.formatting import fmt_gib
from diagnose.model import Capture, Experiment, Verdict
from diagnose.optimizations.base import APPROXIMATE
from diagnose.optimizations.grad_accumulation import MICRO_BATCHES, micro_batches_to_fit

# a failure before backward saw the forward's share of a step's memory: about half of it
BEFORE_BACKWARD_FACTOR = 2.0
# optimizer state a parameter gets at its first step, where the run ran out before any step made it
STATE_PER_PARAMETER = {"adam": 2, "adamw": 2, "nadam": 2, "radam": 2, "adamax": 2, "sgd": 1, "rmsprop": 1,
                       "adagrad": 1}


@dataclass(frozen=True)
class InlineEstimate:
    batch: int
    micro_batch: int
    micro_batches: int
    fixed_bytes: int
    per_sample_bytes: float
    limit_bytes: int
    doubled: bool = False  # it failed before backward: the bytes a sample seen count twice


def estimate(capture: Capture) -> Optional[InlineEstimate]:
    """The fewest micro-batches that fit, from the out-of-memory record; None when it lacks a figure."""
    oom, model = capture.out_of_memory, capture.model
    batch = model.input_batch if model is not None else None
    if oom is None or not oom.limit_bytes or oom.in_use_bytes is None or not batch or batch < MICRO_BATCHES:
        return None
    need = oom.in_use_bytes + (oom.requested_bytes or 0)
    fixed = (oom.start_bytes or 0) + _model_tensors_bytes(capture)
    doubled = oom.phase not in ("backward", "optimizer")
    per_sample = (need - fixed) / batch * (BEFORE_BACKWARD_FACTOR if doubled else 1.0)
    room = oom.limit_bytes * (1 - MARGIN) - fixed
    if per_sample <= 0 or room <= per_sample:
        return None
    micro = min(batch - 1, int(room // per_sample))
    count = micro_batches_to_fit(batch, micro)
    return InlineEstimate(batch, batch // count, count, int(fixed), per_sample, oom.limit_bytes, doubled)


def _model_tensors_bytes(capture: Capture) -> int:
    """Parameters, gradients and the optimizer's state of a step; those the failing step had not made yet
    (gradients before the first backward, Adam's moments before the first step) counted as they will be."""
    sizes = capture.memory_sizes
    if sizes is None:
        return 0
    params = sizes.parameters_bytes
    state = sizes.optimizer_state_bytes
    if not state and capture.optimizers:
        state = STATE_PER_PARAMETER.get(capture.optimizers[0].type.lower(), 0) * params
    return params + max(sizes.gradients_bytes, params) + state


def inline_accumulation(capture: Capture) -> Optional[Experiment]:
    """The recommendation as an experiment that was not run: its setting, the change to make, and why."""
    found = estimate(capture)
    if found is None:
        return None
    setting = {"micro_batches": found.micro_batches, "batch_size": found.micro_batch}
    reason = (f"not verified (no DataLoader to split, so not run): estimated from the run that ran out of memory, "
              f"{fmt_gib(found.fixed_bytes)} fixed + {fmt_gib(int(found.per_sample_bytes))} a sample (from what was "
              f"in use when it failed, a floor{', doubled: it failed before backward' if found.doubled else ''}) "
              f"against {fmt_gib(found.limit_bytes)} less a {MARGIN:.0%} margin: "
              f"make the batch {found.micro_batch} and accumulate {found.micro_batches} of them per optimizer step "
              f"(the same effective batch of {found.micro_batch * found.micro_batches})")
    return Experiment(optimization="grad_accumulation", setting=setting, metric="samples/s", speedup=None, ci=None,
                      verdict=Verdict.NOT_VERIFIED, loss_drift=None, peak_memory_bytes=None, reason=reason,
                      fidelity=APPROXIMATE, change=change_text(found), limit_bytes=found.limit_bytes)


def change_text(found: InlineEstimate) -> str:
    """The change as a nanoGPT-style config says it, and as a loop does it."""
    k = found.micro_batches
    return (f"batch_size = {found.micro_batch}\ngradient_accumulation_steps = {k}\n\n"
            f"# in the loop: {k} micro-batches of {found.micro_batch}, one optimizer step\n"
            f"for micro_step in range({k}):\n"
            f"    x, y = get_batch()  # {found.micro_batch} samples\n"
            f"    (loss_fn(model(x), y) / {k}).backward()\n"
            "optimizer.step()\noptimizer.zero_grad()")
