"""diagnose's reported step time (timed without the profiler) against plain runs of the same script.

    python benchmarks/unprofiled_vs_plain.py [--repeat 3] [--base DIR] SCRIPT [SCRIPT_ARGS...]

Runs, interleaved and `--repeat` times: `diagnose run --experiments none SCRIPT ARGS` (its
`step_time_s.unprofiled`), then benchmarks/time_plain.py on the same script (no profiler, no diagnose), and with
`--base DIR` the diagnose of another checkout (a git worktree of an older commit) as well. Prints each run's
step and the medians' ratios to the plain step: about 1.0 says the reported step is the one the script runs at.
From the repository root; e.g. `python benchmarks/unprofiled_vs_plain.py sample_runs/cuda_train.py --device cpu`.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def diagnose_step(checkout: Path, script: list[str], out: Path) -> float | None:
    env = {**os.environ, "PYTHONPATH": str(checkout)}
    done = subprocess.run([sys.executable, "-m", "diagnose", "run", "--experiments", "none", "--out", str(out),
                           *script], cwd=checkout, env=env, capture_output=True, text=True, timeout=600)
    diagnosis = out / "diagnosis.json"
    if not diagnosis.exists():
        print(done.stderr[-2000:], file=sys.stderr)
        return None
    return json.loads(diagnosis.read_text())["step_time_s"].get("unprofiled")


def plain_step(script: list[str]) -> float | None:
    done = subprocess.run([sys.executable, str(REPO / "benchmarks" / "time_plain.py"), *script], cwd=REPO,
                          capture_output=True, text=True, timeout=600)
    found = re.search(r"plain_step_s=([0-9.eE+-]+)", done.stdout)
    return float(found.group(1)) if found else None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--base", type=Path, help="another checkout whose diagnose is timed as well")
    parser.add_argument("script", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    script = [str((REPO / args.script[0]).resolve()), *args.script[1:]]
    sides = {"diagnose": REPO, **({"base": args.base.resolve()} if args.base else {})}
    steps: dict[str, list[float]] = {name: [] for name in [*sides, "plain"]}
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(args.repeat):
            for name, checkout in sides.items():
                step = diagnose_step(checkout, script, Path(tmp) / f"{name}{i}")
                if step is not None:
                    steps[name].append(step)
                print(json.dumps({"run": i, "tool": name, "step_ms": step and round(step * 1e3, 2)}), flush=True)
            step = plain_step(script)
            if step is not None:
                steps["plain"].append(step)
            print(json.dumps({"run": i, "tool": "plain", "step_ms": step and round(step * 1e3, 2)}), flush=True)
    if not steps["plain"]:
        return 1
    plain = statistics.median(steps["plain"])
    for name, values in steps.items():
        if values:
            median = statistics.median(values)
            print(f"{name:9s} median {median * 1e3:8.2f} ms  ratio to plain {median / plain:5.2f}  "
                  f"runs {', '.join(f'{v * 1e3:.1f}' for v in values)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
