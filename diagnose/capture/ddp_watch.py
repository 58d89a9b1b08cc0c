"""DistributedDataParallel, watched from inside the child: its constructor's settings and the user's line, the
changes an experiment makes to them (ChangeSet.ddp_edits, ddp_hooks), and what its backward passes do: how many
backward() calls make an optimizer step, how many of them all-reduce (a forward outside no_sync()), how many
parameters got no gradient, and the time DDP spends finding unused parameters (a `diagnose::ddp_find_unused`
span in the trace around its graph walk)."""
from __future__ import annotations

import functools
import inspect
import sys
from collections import Counter
from typing import Optional

import torch

from diagnose.capture.changes import ChangeSet
from diagnose.capture.sites import user_location
from diagnose.model import DDP_FIND_UNUSED_SPAN, DdpInfo

DEFAULT_BUCKET_CAP_MB = 25.0


class DdpWatch:
    """The first DistributedDataParallel the script builds (the one that trains), and its backward passes."""

    def __init__(self) -> None:
        self.info: Optional[DdpInfo] = None
        self.module = None  # the wrapper, for its require_backward_grad_sync
        self.tracked = 0  # parameters that require a gradient
        self.fired = 0  # of those, gradients accumulated in the backward under way
        self.last_forward_synced: Optional[bool] = None
        self.backwards = self.synced = 0  # in the optimizer step under way
        self.per_step: Counter = Counter()  # (backwards, synced) per optimizer step
        self.unused_max: Optional[int] = None
        self.backwards_seen = 0
        self.backward_location: Optional[str] = None

    # -- construction --------------------------------------------------------------------------------
    def built(self, ddp, frame, bucket_cap_mb) -> None:
        if self.info is not None:
            return
        params = [p for p in ddp.module.parameters() if p.requires_grad]
        for p in params:
            p.register_post_accumulate_grad_hook(self._grad_accumulated)
        self.module, self.tracked = ddp, len(params)
        backend, world = _group(ddp)
        self.info = DdpInfo(
            location=user_location(frame),
            find_unused_parameters=bool(ddp.find_unused_parameters),
            static_graph=bool(ddp.static_graph),
            gradient_as_bucket_view=bool(ddp.gradient_as_bucket_view),
            bucket_cap_mb=float(bucket_cap_mb) if bucket_cap_mb is not None else DEFAULT_BUCKET_CAP_MB,
            broadcast_buffers=bool(getattr(ddp, "broadcast_buffers", True)),
            backend=backend, world_size=world, parameters=len(params),
            gradient_bytes=sum(p.numel() * p.element_size() for p in params),
        )

    def _grad_accumulated(self, param) -> None:
        self.fired += 1

    # -- the loop ------------------------------------------------------------------------------------
    def forward_started(self, ddp) -> None:
        if ddp is self.module and torch.is_grad_enabled():
            self.last_forward_synced = bool(ddp.require_backward_grad_sync)

    def before_backward(self, frame) -> None:
        self.fired = 0
        if self.backward_location is None and self.info is not None:
            self.backward_location = user_location(frame)

    def after_backward(self) -> None:
        if self.info is None or self.last_forward_synced is None:
            return
        self.backwards += 1
        self.backwards_seen += 1
        self.synced += int(self.last_forward_synced)
        missed = max(0, self.tracked - self.fired)
        self.unused_max = missed if self.unused_max is None else max(self.unused_max, missed)
        self.last_forward_synced = None

    def optimizer_stepped(self) -> None:
        if self.backwards:
            self.per_step[(self.backwards, self.synced)] += 1
        self.backwards = self.synced = 0

    def record(self) -> Optional[DdpInfo]:
        if self.info is None:
            return None
        from dataclasses import replace

        common = self.per_step.most_common(1)
        backwards, synced = common[0][0] if common else (None, None)
        return replace(self.info, backward_location=self.backward_location, backwards_per_step=backwards,
                       synced_backwards_per_step=synced, unused_parameters=self.unused_max,
                       backwards_seen=self.backwards_seen)


def _group(ddp) -> tuple[Optional[str], Optional[int]]:
    import torch.distributed as dist

    try:
        group = getattr(ddp, "process_group", None)
        return str(dist.get_backend(group)), int(dist.get_world_size(group))
    except Exception:  # no default group (a test building DDP on a group of its own)
        return None, None


def install(watch: DdpWatch, changes: ChangeSet, in_main_thread, patch) -> None:
    """Wrap the class's __init__ (settings, edits, hooks), forward (whether it syncs) and _post_forward (the unused
    parameters' search, as a span of the trace). `patch(owner, name, make_wrapper)` undoes itself at uninstall."""
    try:
        from torch.nn.parallel import DistributedDataParallel as DDP
    except ImportError:  # a torch built without distributed
        return
    signature = inspect.signature(DDP.__init__)

    def wrap_init(original):
        @functools.wraps(original)
        def init(ddp, *args, **kwargs):
            first = watch.info is None
            arguments = signature.bind(ddp, *args, **kwargs).arguments
            if first:
                for edit in changes.ddp_edits:
                    edit(arguments)
            original(**arguments)
            if first:
                watch.built(ddp, sys._getframe(1), arguments.get("bucket_cap_mb"))
                for hook in changes.ddp_hooks:
                    hook(ddp)

        return init

    def wrap_forward(original):
        @functools.wraps(original)
        def forward(ddp, *args, **kwargs):
            if in_main_thread():
                watch.forward_started(ddp)
            return original(ddp, *args, **kwargs)

        return forward

    def wrap_post_forward(original):
        @functools.wraps(original)
        def post_forward(ddp, output):
            if (ddp.find_unused_parameters and not ddp.static_graph and torch.is_grad_enabled()
                    and ddp.require_backward_grad_sync):
                with torch.profiler.record_function(DDP_FIND_UNUSED_SPAN):
                    return original(ddp, output)
            return original(ddp, output)

        return post_forward

    patch(DDP, "__init__", wrap_init)
    patch(DDP, "forward", wrap_forward)
    if hasattr(DDP, "_post_forward"):
        patch(DDP, "_post_forward", wrap_post_forward)
