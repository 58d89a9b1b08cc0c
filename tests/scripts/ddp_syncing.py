"""The no_sync() runtime (diagnose.optimizations.syncing) and the DDP watch on a one-process gloo group: prints one
JSON line with which forwards all-reduced, the all-reduces the early step made, and what the watch recorded.
`--grad-accumulation`: the grad_accumulation experiment's changes instead, on a loop that steps every micro-batch."""
import json
import os
import sys

import torch
import torch.distributed as dist
from torch import nn

from diagnose.capture.changes import ChangeSet
from diagnose.capture.instrument import Instrumentation
from diagnose.model import Change
from diagnose.optimizations.runtime import build_change_set
from diagnose.optimizations.syncing import sync_only_last

ACCUMULATING = "--grad-accumulation" in sys.argv
os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
os.environ.setdefault("MASTER_PORT", sys.argv[1] if len(sys.argv) > 1 else "29533")
dist.init_process_group("gloo", rank=0, world_size=1)
if ACCUMULATING:  # 2 micro-batches per optimizer step, the script's own loop stepping after each
    changes = build_change_set([Change("grad_accumulation", {"micro_batches": 2, "batch_size": 2, "ddp_syncs": 1})],
                               None)
else:
    changes = ChangeSet()
    changes.ddp_hooks.append(lambda ddp: sync_only_last(ddp, 3))
instr = Instrumentation(lambda step: None, changes)
instr.install()
synced, reduced = [], []
real_all_reduce = dist.all_reduce
dist.all_reduce = lambda tensor, *a, **k: (reduced.append(tuple(tensor.shape)), real_all_reduce(tensor, *a, **k))[1]


class WithUnused(nn.Module):
    def __init__(self):
        super().__init__()
        self.used, self.unused = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2)), nn.Linear(2, 2)

    def forward(self, x):
        return self.used(x)


inner = WithUnused()
model = nn.parallel.DistributedDataParallel(inner, bucket_cap_mb=10, find_unused_parameters=True)  # the line read
inner.register_forward_pre_hook(lambda m, i: synced.append(bool(model.require_backward_grad_sync)))
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
x = torch.randn(4, 4)
steps = []
optimizer.register_step_post_hook(lambda *args: steps.append(len(synced)))
for micro_batches in ((1,) * 6 if ACCUMULATING else (3, 3, 2)):  # (3, 3, 2): the last step comes early, its waiting
    for _ in range(micro_batches):  # gradients all-reduced by hand
        model(x).sum().backward()
    optimizer.step()
    optimizer.zero_grad()
with torch.no_grad():
    model(x)  # evaluation passes as it is
instr.uninstall()
record = instr.ddp.record()
print(json.dumps({"synced": synced, "reduced": len(reduced), "ddp": record.__dict__, "steps": steps}))
dist.destroy_process_group()
