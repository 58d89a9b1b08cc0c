"""no_sync() on the micro-batches of an accumulation before its last, inside an unchanged loop (the runtime of the
ddp.no_sync experiment, and of grad_accumulation under DistributedDataParallel, in the variant's process): of every
k forwards through the wrapper between two optimizer steps, the first k-1 run inside its no_sync() (DDP decides in
the forward whether the backward all-reduces), the k-th all-reduces the gradients summed over all k. A step that
comes before its k-th forward (an epoch that ends inside an accumulation) all-reduces the waiting gradients itself
first, as DDP would have: every rank then steps with the same averaged gradients."""
from __future__ import annotations

import types


class Syncing:
    def __init__(self, ddp, k: int):
        self.ddp, self.k = ddp, k
        self.forwards = 0  # forwards that count since the last optimizer step
        self.waiting = False  # gradients of a micro-batch run under no_sync() are not all-reduced yet

    def forward(self, forward, *args, **kwargs):
        import torch

        ddp = self.ddp
        if not (torch.is_grad_enabled() and ddp.training and ddp.require_backward_grad_sync):
            return forward(*args, **kwargs)  # evaluation, or the script's own no_sync(): as the script runs it
        self.forwards += 1
        if self.forwards % self.k:
            self.waiting = True
            with ddp.no_sync():
                return forward(*args, **kwargs)
        self.waiting = False
        return forward(*args, **kwargs)

    def before_step(self, optimizer, args, kwargs) -> None:
        if self.waiting:
            self._all_reduce_waiting()
        self.forwards, self.waiting = 0, False

    def _all_reduce_waiting(self) -> None:
        import torch.distributed as dist

        group = getattr(self.ddp, "process_group", None)
        world = dist.get_world_size(group)
        for p in self.ddp.module.parameters():
            if p.grad is not None:
                dist.all_reduce(p.grad, group=group)
                p.grad.div_(world)


def sync_only_last(ddp, k: int) -> None:
    """Wrap this DistributedDataParallel's forward (an attribute of the instance: the class's stays as it was)."""
    import torch.optim.optimizer as optimizer_module

    state = Syncing(ddp, k)
    forward = ddp.forward
    ddp.forward = types.MethodType(lambda self, *args, **kwargs: state.forward(forward, *args, **kwargs), ddp)
    optimizer_module.register_optimizer_step_pre_hook(state.before_step)
