"""Is a host-bound training loop slower after torch.profiler has run in its process, diagnose aside?

    python benchmarks/after_profiler.py [--device cuda] [--repeat 3]

diagnose timed its unprofiled steps after the profiled window, in the same process, until this probe showed why
it should not (it now times them before the profiler starts). On an H200 the step it reported for
sample_runs/cuda_train.py was 10-26% over a plain run's (benchmarks/README.md). This runs that
script's loop (model, data and batch size) with no diagnose at all, in fresh processes: 20 steps timed before the
profiler, 20 profiled as diagnose profiles them (CPU and CUDA activities, shapes, memory, the TensorBoard handler),
then two windows of 20 timed after it (and two before it, the first to see whether the loop is still
warming up) (two steps after the trace was written left out). Each window is timed with
the device synchronised at its edges only. Half the processes keep Kineto's default (TEARDOWN_CUPTI unset: CUPTI
stays attached) and half ask it to detach (TEARDOWN_CUPTI=1), alternated. One JSON line per process, then the
ratios after/before: about 1.0 says the profiler leaves nothing behind and a gap under diagnose is diagnose's own.
Each window's minor page faults per step are printed too: on a CPU, this loop faulted about 93,000 pages a step
run plainly and none after the profiler's memory was collected, and ran 1.8x faster (benchmarks/README.md).
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
WINDOW, WARMUP, REWARM = 20, 10, 2


def one_process(device: str) -> dict:
    import torch
    from torch import nn

    sys.path.insert(0, str(REPO / "sample_runs"))
    from cuda_train import NoisyImages, make_model

    torch.manual_seed(0)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    loader = torch.utils.data.DataLoader(NoisyImages(4096), batch_size=32, shuffle=True, num_workers=0)
    model = make_model().to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    batches = iter(loader)

    def step() -> None:
        nonlocal batches
        try:
            images, labels = next(batches)
        except StopIteration:
            batches = iter(loader)
            images, labels = next(batches)
        images, labels = images.to(device), labels.to(device)
        optimizer.zero_grad(set_to_none=True)
        loss = loss_fn(model(images), labels)
        loss.backward()
        optimizer.step()
        loss.item()  # a host-device sync every step, as in the sample

    faults: dict[str, float] = {}

    def timed(steps: int, label: str) -> float:
        sync()
        start, faulted = time.perf_counter(), resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        for _ in range(steps):
            step()
        sync()
        faults[label] = (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faulted) / steps
        return (time.perf_counter() - start) / steps

    def sync() -> None:
        if device.startswith("cuda"):
            torch.cuda.synchronize()

    for _ in range(WARMUP):
        step()
    earlier, before = timed(WINDOW, "earlier"), timed(WINDOW, "before")  # two windows: is the loop still warming up?
    activities = [torch.profiler.ProfilerActivity.CPU]
    if device.startswith("cuda"):
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    with tempfile.TemporaryDirectory() as trace_dir:
        profiler = torch.profiler.profile(activities=activities, record_shapes=True, profile_memory=True,
                                          on_trace_ready=torch.profiler.tensorboard_trace_handler(trace_dir))
        sync()
        profiler.start()
        profiled = timed(WINDOW, "profiled")
        profiler.stop()
    del profiler
    import gc
    gc.collect()
    for _ in range(REWARM):
        step()
    after, later = timed(WINDOW, "after"), timed(WINDOW, "later")
    return {"teardown": os.environ.get("TEARDOWN_CUPTI", "unset"), "earlier_ms": earlier * 1e3,
            "before_ms": before * 1e3,
            "profiled_ms": profiled * 1e3, "after_ms": after * 1e3, "later_ms": later * 1e3,
            "page_faults_per_step": faults}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--repeat", type=int, default=3, help="processes of each kind, alternated")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(one_process(args.device)), flush=True)
        return 0
    rows = []
    for _ in range(args.repeat):
        for teardown in (None, "1"):
            env = {k: v for k, v in os.environ.items() if k != "TEARDOWN_CUPTI"}
            if teardown:
                env["TEARDOWN_CUPTI"] = teardown
            done = subprocess.run([sys.executable, __file__, "--child", "--device", args.device], env=env,
                                  capture_output=True, text=True, timeout=300)
            if done.returncode:
                print(done.stderr[-2000:], file=sys.stderr)
                return 1
            rows.append(json.loads(done.stdout.strip().splitlines()[-1]))
            print(json.dumps(rows[-1]), flush=True)
    for kind in ("unset", "1"):
        mine = [r for r in rows if r["teardown"] == kind]
        ratios = [r["after_ms"] / r["before_ms"] for r in mine]
        later = [r["later_ms"] / r["before_ms"] for r in mine]
        print(f"TEARDOWN_CUPTI={kind}: after/before median {statistics.median(ratios):.3f} "
              f"({', '.join(f'{x:.3f}' for x in ratios)}); later/before {statistics.median(later):.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
