"""Two ranks (gloo, DDP) with diagnose.window at step 20 of 30: each rank writes its trace, rank 0 the report over
both. argv: RUN_DIR. Rank 0 prints the window's diagnosis."""
import json
import sys

import torch
import torch.distributed as dist

import diagnose

dist.init_process_group("gloo")
torch.manual_seed(0)
model = torch.nn.parallel.DistributedDataParallel(torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(),
                                                                      torch.nn.Linear(64, 1)))
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
x, y = torch.randn(64, 32), torch.randn(64, 1)
with diagnose.window(at_step=20, steps=3, out=sys.argv[1]) as window:
    for step in range(30):
        window.step()
        loss = torch.nn.functional.mse_loss(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
if dist.get_rank() == 0:
    result = window.result(timeout=120)
    print(json.dumps({"ranks": len(result.diagnosis.ranks), "steps_profiled": result.diagnosis.steps_profiled,
                      "exit_code": result.exit_code, "verdict": result.verdict}))
dist.barrier()  # rank 1 must not tear gloo down while rank 0 still waits for the report (it aborts: SIGABRT)
dist.destroy_process_group()
