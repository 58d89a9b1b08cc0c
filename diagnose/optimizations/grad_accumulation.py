"""Gradient accumulation: smaller micro-batches, the same effective batch, less memory."""
from diagnose.optimizations.recommendation import Recommendation
from diagnose.optimizations.registry import register


@register
class GradAccumulation(Recommendation):
    id = "grad_accumulation"
    title = "Gradient accumulation"
    why_not_applied = "the loop must call optimizer.step() every k micro-batches and scale the loss by 1/k"
    code = ("for i, (x, y) in enumerate(loader):  # loader batch_size = old_batch_size // k\n"
            "    (loss_fn(model(x), y) / k).backward()\n"
            "    if (i + 1) % k == 0:\n"
            "        optimizer.step(); optimizer.zero_grad()")
