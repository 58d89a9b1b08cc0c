"""Plain torchrun runs of sample_runs/ddp_settings.py with and without each DDP change, interleaved and repeated:
the figures diagnose's experiments on that script are checked against (no diagnose, no profiler).

    python benchmarks/ddp_settings_plain.py [--repeats 3] [--max-steps 0] [--nproc 2]

Each repeat runs every variant once, in order (baseline, then each change by its own flag of the script). Printed
per variant: the median whole-job wall time (torchrun's start to its end) and the median training-loop time the
script prints, and their ratio to the baseline's (>1: the change is faster).
"""
from __future__ import annotations

import argparse
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "sample_runs" / "ddp_settings.py"
VARIANTS = {
    "baseline": [],
    "ddp.no_sync": ["--no-sync"],
    "ddp.find_unused_parameters": ["--no-find-unused"],
    "ddp.static_graph": ["--static-graph"],
    "ddp.gradient_as_bucket_view": ["--bucket-view"],
    "ddp.bucket_cap_mb=6.2": ["--bucket-cap-mb", "6.2"],
    "ddp.bucket_cap_mb=100": ["--bucket-cap-mb", "100"],
}


def one_run(args: list[str], nproc: int, max_steps: int) -> tuple[float, float]:
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(nproc), str(SCRIPT),
               "--max-steps", str(max_steps), *args]
    start = time.perf_counter()
    proc = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=600)
    whole = time.perf_counter() - start
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(args) or 'baseline'} exited {proc.returncode}: {proc.stderr[-2000:]}")
    loop = float(re.search(r"done: \d+ steps in ([\d.]+) s", proc.stdout).group(1))
    return whole, loop


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--max-steps", type=int, default=0, help="optimizer steps per run (0: the whole epoch)")
    parser.add_argument("--nproc", type=int, default=2)
    parser.add_argument("--only", default="", help="comma-separated variants besides the baseline (default: all)")
    args = parser.parse_args()
    chosen = ["baseline"] + [v for v in VARIANTS if v != "baseline" and (not args.only or v in args.only.split(","))]
    times: dict[str, list[tuple[float, float]]] = {v: [] for v in chosen}
    for repeat in range(args.repeats):
        for variant in chosen:
            times[variant].append(one_run(VARIANTS[variant], args.nproc, args.max_steps))
            whole, loop = times[variant][-1]
            print(f"repeat {repeat + 1} {variant}: whole {whole:.2f} s, loop {loop:.2f} s", flush=True)
    base_whole = statistics.median(w for w, _ in times["baseline"])
    base_loop = statistics.median(loop for _, loop in times["baseline"])
    print(f"\n{'variant':<30} {'whole s':>8} {'ratio':>6} {'loop s':>8} {'ratio':>6}")
    for variant in chosen:
        whole = statistics.median(w for w, _ in times[variant])
        loop = statistics.median(loop for _, loop in times[variant])
        print(f"{variant:<30} {whole:8.2f} {base_whole / whole:6.2f} {loop:8.2f} {base_loop / loop:6.2f}")


if __name__ == "__main__":
    main()
