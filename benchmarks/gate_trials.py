"""The interleaved CI gate's power and false-alarm rate: repeated trials of `diagnose compare --live`.

    python benchmarks/gate_trials.py [--trials 5] [--allowed 3] [--budget-seconds 200] [--record]

Each trial compares tests/scripts/gate_step.py (20 blocks) with two B sides, alternately:
- power: a copy with LAYERS = 21, 5% more work a step; the gate should fail it (exit 4);
- false alarm: the script against an identical copy; the gate should pass it (exit 0, decided: an undecided gate
  exits 0 too, but it is not counted right).
Printed per trial: the decision, the ratio and its 99% interval, pairs, rounds and wall seconds; with --record,
appended to benchmarks/results/gate_trials.jsonl with the machine and commit (docs/guide/ci-gate.md quotes them).
"""
from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from machine import commit, machine

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "tests" / "scripts" / "gate_step.py"
RESULTS = ROOT / "benchmarks" / "results" / "gate_trials.jsonl"
EXPECTED = {"power": ("fail", 4), "false-alarm": ("pass", 0)}  # the decision and exit code that are right


def sides(folder: Path) -> dict[str, tuple[Path, Path]]:
    a = folder / "gate_step.py"
    shutil.copy(SCRIPT, a)
    more = folder / "gate_step_more.py"
    more.write_text(SCRIPT.read_text().replace("LAYERS = 20", "LAYERS = 21"))
    same = folder / "gate_step_same.py"
    shutil.copy(SCRIPT, same)
    return {"power": (a, more), "false-alarm": (a, same)}


def trial(kind: str, a: Path, b: Path, allowed: float, budget_s: float, out: Path) -> dict:
    command = [sys.executable, "-m", "diagnose", "compare", "--live", str(a), str(b), "--fail-if-slower",
               f"{allowed:g}", "--budget-seconds", f"{budget_s:g}", "--out", str(out)]
    started = time.monotonic()
    done = subprocess.run(command, capture_output=True, text=True, timeout=budget_s + 300)
    wall = time.monotonic() - started
    live = json.loads((out / "live.json").read_text())
    decision, code = EXPECTED[kind]
    return {"kind": kind, "exit": done.returncode,
            "right": done.returncode == code and live["gate"]["decision"] == decision,
            "decision": live["gate"]["decision"], "ratio": live["ratio"], "ci": live["ci"], "pairs": live["pairs"],
            "rounds": len(live["rounds"]), "pair_sd": live["pair_sd"], "process_sd": live["process_sd"],
            "wall_s": round(wall, 1), "allowed_pct": allowed, "budget_s": budget_s}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=5)
    parser.add_argument("--allowed", type=float, default=3.0, help="--fail-if-slower PCT")
    parser.add_argument("--budget-seconds", type=float, default=200.0)
    parser.add_argument("--only", choices=sorted(EXPECTED), help="run one kind of trial")
    parser.add_argument("--record", action="store_true", help=f"append the results to {RESULTS.name}")
    args = parser.parse_args()
    kinds = [args.only] if args.only else ["power", "false-alarm"]
    results = []
    with tempfile.TemporaryDirectory(prefix="gate-trials-") as tmp:
        pairs = sides(Path(tmp))
        for number in range(args.trials):
            for kind in kinds:
                result = trial(kind, *pairs[kind], args.allowed, args.budget_seconds, Path(tmp) / f"{kind}-{number}")
                results.append(result)
                low, high = result["ci"] or (0.0, 0.0)
                print(f"{kind:11} {'right' if result['right'] else 'WRONG':5} {result['decision']:9} "
                      f"{result['ratio'] or 0:.3f} [{low:.3f}-{high:.3f}] {result['pairs']} pairs, "
                      f"{result['rounds']} rounds, {result['wall_s']:.0f} s", flush=True)
    for kind in kinds:
        mine = [r for r in results if r["kind"] == kind]
        slowest = max(r["wall_s"] for r in mine)
        print(f"{kind}: {sum(r['right'] for r in mine)} of {len(mine)} right, slowest {slowest:.0f} s")
    if args.record:
        record(results, args)


def record(results: list[dict], args) -> None:
    """One row as written per trial (benchmarks/tables.py renders them into benchmarks/README.md)."""
    command = (f"python benchmarks/gate_trials.py --trials {args.trials} --budget-seconds {args.budget_seconds:g} "
               "--record")
    number = {kind: 0 for kind in EXPECTED}
    with RESULTS.open("a") as out:
        for r in results:
            number[r["kind"]] += 1
            low, high = r["ci"] or (0.0, 0.0)
            b_side = "5% more work" if r["kind"] == "power" else "the same script"
            cells = {"trial": str(number[r["kind"]]), "B": b_side,
                     "decision": r["decision"] + ("" if r["right"] else " (wrong)"),
                     "ratio [99%]": f"{r['ratio'] or 0:.3f} [{low:.3f}-{high:.3f}]",
                     "pairs, rounds": f"{r['pairs']}, {r['rounds']}", "pair spread": f"{r['pair_sd']:.1%}",
                     "processes' spread": f"{r['process_sd']:.1%}", "seconds": f"{r['wall_s']:.0f}"}
            out.write(json.dumps({"commit": commit(), "date": time.strftime("%Y-%m-%d"), "machine": machine(),
                                  "command": command, "cells": cells}) + "\n")

if __name__ == "__main__":
    main()
