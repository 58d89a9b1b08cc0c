"""How long `diagnose run` spends analysing its own trace, against the whole run: each sample run once with
`--experiments none` (and again with `--with-stack`), its "Traces analysed in N s (P% of ...)" line read back.

    python benchmarks/analysis_share.py [SCRIPT ...] [--record benchmarks/results/run_analysis_share.jsonl]

Issue 39's target: the analysis under 10% of the run. The run's trace is the JSON in the run folder's tb/.
"""
from __future__ import annotations

import argparse
import datetime
import json
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = ("sample_runs/host_overhead.py", "sample_runs/slow_loader.py")
ANALYSED = re.compile(r"Traces analysed in ([\d.]+) s \((\d+)% of the ([\d.]+) s")


def run_once(script: str, with_stack: bool, folder: Path) -> dict:
    """The cells of one run: script, trace size, analysed in, its share of the run so far, the whole process."""
    out = folder / f"{Path(script).stem}{'_stack' * with_stack}"
    command = [sys.executable, "-m", "diagnose", "run", "--experiments", "none", "--out", str(out),
               *(["--with-stack"] * with_stack), script]
    start = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, timeout=600)
    whole = time.perf_counter() - start
    found = ANALYSED.search(done.stdout + done.stderr)
    if done.returncode != 0 or found is None:
        raise SystemExit(f"{' '.join(command)} failed (exit {done.returncode}):\n"
                         f"{done.stdout[-2000:]}{done.stderr[-2000:]}")
    trace_bytes = sum(p.stat().st_size for p in (out / "tb").glob("*.json"))
    seconds, share, so_far = found.groups()
    return {"script": Path(script).name + " --with-stack" * with_stack, "trace": f"{trace_bytes / 1e6:.0f} MB",
            "analysed in": f"{float(seconds):.2f} s", "share of the run so far": f"{share}% of {so_far} s",
            "whole process": f"{whole:.1f} s"}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("scripts", nargs="*", default=list(SCRIPTS))
    parser.add_argument("--record", type=Path, default=None, help="append the rows to this results file")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        rows = [run_once(script, stack, Path(folder)) for stack in (False, True) for script in args.scripts]
    for row in rows:
        print(" | ".join(row.values()))
    if args.record:
        sys.path.insert(0, str(Path(__file__).parent))
        from machine import commit, machine

        at = {"commit": commit(), "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d"),
              "machine": machine(), "command": "benchmarks/analysis_share.py " + " ".join(sys.argv[1:])
              + " (diagnose run --experiments none [--with-stack], one run each)"}
        with args.record.open("a") as file:
            file.writelines(json.dumps({**at, "cells": row}) + "\n" for row in rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
