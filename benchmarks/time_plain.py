"""Time a training script's steps plainly: no profiler, no diagnose, only a global optimizer-step hook.

    python benchmarks/time_plain.py [--warmup-steps 10] [--timed-steps 20] SCRIPT [SCRIPT_ARGS...]

Runs SCRIPT as `python SCRIPT ARGS` would, counts optimizer steps, synchronises the device (when the script uses
CUDA) at the end of step `--warmup-steps` and again `--timed-steps` steps later, never in between, prints
`plain_step_s=<seconds per step> steps=<n> device=<cuda|cpu>` and ends the script there. The reference that
benchmarks/gpu_check.sh holds diagnose's reported step time against, for scripts without a timing mode of
their own.
"""
from __future__ import annotations

import argparse
import os
import runpy
import sys
import time

import torch
from torch.optim.optimizer import register_optimizer_step_post_hook


class Done(BaseException):
    """Ends the script once the window is timed (BaseException: `except Exception` in the script lets it pass)."""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--warmup-steps", type=int, default=10)
    parser.add_argument("--timed-steps", type=int, default=20)
    parser.add_argument("script")
    parser.add_argument("script_args", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    steps, marks = [0], {}

    def synchronize() -> str:
        if torch.cuda.is_available() and torch.cuda.is_initialized():
            torch.cuda.synchronize()
            return "cuda"
        return "cpu"

    def after_step(optimizer, *_):
        steps[0] += 1
        if steps[0] == args.warmup_steps:
            synchronize()
            marks["start"] = time.perf_counter()
        elif steps[0] == args.warmup_steps + args.timed_steps:
            device = synchronize()
            seconds = (time.perf_counter() - marks["start"]) / args.timed_steps
            print(f"plain_step_s={seconds:.6f} steps={args.timed_steps} device={device}", flush=True)
            raise Done

    register_optimizer_step_post_hook(after_step)
    sys.argv = [args.script, *args.script_args]
    sys.path.insert(0, os.path.dirname(os.path.realpath(args.script)))
    try:
        runpy.run_path(args.script, run_name="__main__")
    except Done:
        return 0
    print(f"time_plain: {args.script} ended after {steps[0]} optimizer steps, before the timed window closed",
          file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
