"""How far one script's step time moves between runs, and whether compare's interval holds what plain runs say.

    python benchmarks/run_noise.py [--trials 5] [--script tests/scripts/calibration_mlp.py]
                                   [--b-args "--width 1536"] [--plain-steps 40] [--out DIR]

Each trial runs, interleaved: `diagnose run` of the script (A), of the script with --b-args (B), and each plainly
(benchmarks/time_plain.py, no profiler, no diagnose). Then:
- the run-to-run spread: the sample std of log(A's unprofiled step) over the trials, beside the spread each run
  measured between the blocks of its own timed window (what compare uses);
- re-runs: `diagnose compare` of each A against the next (should read no-change);
- the pair: `diagnose compare` of A against B in each trial, against the ratio of the plain runs' medians: the
  99% interval should hold it, and the ratio land within 20% of it.
The spread printed first is the documented default of diagnose/compare/interval.py (RUN_NOISE_DEFAULT_SD).
"""
from __future__ import annotations

import argparse
import json
import math
import shlex
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RUN_OPTIONS = ("--experiments", "none")


def diagnose_run(script: str, args: list[str], out: Path) -> dict:
    command = [sys.executable, "-m", "diagnose", "run", *RUN_OPTIONS, "--out", str(out), script, *args]
    proc = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=900)
    if proc.returncode != 0:
        raise RuntimeError(f"diagnose run exited {proc.returncode}: {proc.stderr[-2000:]}")
    return json.loads((out / "diagnosis.json").read_text())


def plain_step_s(script: str, args: list[str], steps: int) -> float:
    command = [sys.executable, str(ROOT / "benchmarks" / "time_plain.py"), "--warmup-steps", "10", "--timed-steps",
               str(steps), script, *args]
    proc = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=900)
    line = next((x for x in proc.stdout.splitlines() + proc.stderr.splitlines() if x.startswith("plain_step_s=")), None)
    if line is None:
        raise RuntimeError(f"time_plain.py printed no step time: {proc.stderr[-2000:]}")
    return float(line.split()[0].split("=")[1])


def compare(a: Path, b: Path, out: Path) -> dict:
    command = [sys.executable, "-m", "diagnose", "compare", "--json", "--out", str(out), str(a), str(b)]
    proc = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=600)
    if proc.returncode not in (0, 4):
        raise RuntimeError(f"diagnose compare exited {proc.returncode}: {proc.stderr[-2000:]}")
    return json.loads(proc.stdout)


def log_sd(values: list[float]) -> float:
    logs = [math.log(v) for v in values]
    return statistics.stdev(logs) if len(logs) > 1 else float("nan")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=5)
    parser.add_argument("--script", default="tests/scripts/calibration_mlp.py")
    parser.add_argument("--b-args", default="--width 1536")
    parser.add_argument("--plain-steps", type=int, default=40)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    out = args.out or Path(tempfile.mkdtemp(prefix="run-noise-"))
    b_args = shlex.split(args.b_args)
    runs_a, runs_b, plain_a, plain_b = [], [], [], []
    for trial in range(args.trials):
        runs_a.append(out / f"a{trial}")
        diagnose_run(args.script, [], runs_a[-1])
        runs_b.append(out / f"b{trial}")
        diagnose_run(args.script, b_args, runs_b[-1])
        plain_a.append(plain_step_s(args.script, [], args.plain_steps))
        plain_b.append(plain_step_s(args.script, b_args, args.plain_steps))
        print(f"trial {trial}: plain A {plain_a[-1] * 1e3:.1f} ms, plain B {plain_b[-1] * 1e3:.1f} ms", flush=True)
    unprofiled = [json.loads((r / "diagnosis.json").read_text())["step_time_s"]["unprofiled"] for r in runs_a]
    truth = statistics.median(plain_b) / statistics.median(plain_a)
    print(f"A's unprofiled step over {args.trials} runs: " + ", ".join(f"{u * 1e3:.1f}" for u in unprofiled)
          + f" ms; run-to-run spread (std of log) {log_sd(unprofiled):.3f}")
    print(f"plain A: spread {log_sd(plain_a):.3f}; plain B: spread {log_sd(plain_b):.3f}; plain B/A {truth:.3f}")
    held = within = same = 0
    for trial in range(args.trials):
        pair = compare(runs_a[trial], runs_b[trial], out / f"cmp-ab{trial}")
        step = pair["step"]
        holds = step["ci"][0] <= truth <= step["ci"][1]
        close = abs(step["ratio"] / truth - 1) <= 0.2
        held, within = held + holds, within + close
        print(f"A{trial} vs B{trial}: {step['ratio']:.3f} [{step['ci'][0]:.3f}-{step['ci'][1]:.3f}] "
              f"({step['run_noise_source']} {step['run_noise_sd']:.3f}; blocks A {pair['a']['block_noise_sd']}, "
              f"B {pair['b']['block_noise_sd']}): holds {truth:.3f}: {holds}; within 20%: {close}")
        if trial + 1 < args.trials:
            again = compare(runs_a[trial], runs_a[trial + 1], out / f"cmp-aa{trial}")["step"]
            same += again["verdict"] == "no-change"
            print(f"A{trial} vs A{trial + 1}: {again['ratio']:.3f} [{again['ci'][0]:.3f}-{again['ci'][1]:.3f}] "
                  f"{again['verdict']}")
    print(f"intervals holding the plain ratio: {held} of {args.trials}; within 20%: {within} of {args.trials}; "
          f"re-runs no-change: {same} of {args.trials - 1}; run folders in {out}")
    return 0 if held == args.trials and same == args.trials - 1 else 1


if __name__ == "__main__":
    sys.exit(main())
