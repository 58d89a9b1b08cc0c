"""Calibrate the findings: for each script, every finding's predicted speedup against what its experiment measured.

    python benchmarks/calibration.py [--budget-seconds 120] [--out DIR] [--markdown FILE] [--record FILE]
                                     [SCRIPT ...]

Runs `diagnose run SCRIPT` (experiments as the findings recommend them, within the budget) for each script, the
bundled CPU samples by default, and prints one row per finding: its cost (the share of the step its fix would
remove), the speedup that predicts at the change its best experiment made, what that experiment measured with its
99% interval, and their ratio. A prediction more than 2x off either way is a rule whose cost does not follow its
evidence. `--markdown` writes the table; `--record benchmarks/results/calibration.jsonl` appends its rows to the
results file benchmarks/README.md's table is rendered from (benchmarks/tables.py). tests/test_calibration.py asserts
on the same rows: the slow tier on the two runs with experiments it shares, the bench tier on four scripts.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

ROOT = Path(__file__).resolve().parent.parent
# the bundled samples that run on a CPU, with the arguments that keep each a minute or so
SAMPLES = (
    ("sample_runs/tiny_batch.py", ()),
    ("sample_runs/slow_loader.py", ()),
    ("sample_runs/cpu_preprocessing.py", ()),
    ("sample_runs/host_overhead.py", ()),
    ("sample_runs/manual_update.py", ()),
    ("sample_runs/healthy.py", ()),
    ("tests/scripts/calibration_mlp.py", ()),
)


@dataclass(frozen=True)
class Row:
    script: str
    rule: str
    severity: str
    cost: float
    predicted: float
    experiment: str
    measured: Optional[float]
    ci: Optional[tuple[float, float]]
    verdict: str
    ratio: Optional[float]


def diagnose_script(script: Path, args: tuple[str, ...], out: Path, budget_s: float) -> dict:
    command = [sys.executable, "-m", "diagnose", "run", "--out", str(out), "--budget-seconds", str(budget_s),
               str(script), *args]
    proc = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=budget_s * 4 + 600)
    if proc.returncode != 0:
        raise RuntimeError(f"{script}: diagnose exited {proc.returncode}\n{proc.stderr[-3000:]}")
    return json.loads((out / "diagnosis.json").read_text())


def rows_of(script: str, diagnosis: dict) -> list[Row]:
    checks = {c["rule"]: c for c in diagnosis.get("predictions", [])}
    rows = []
    for finding in diagnosis["findings"]:
        check = checks.get(finding["rule"])
        if check is None:  # a memory risk: no speedup predicted
            continue
        ci = tuple(check["measured_ci"]) if check.get("measured_ci") else None
        rows.append(Row(script, finding["rule"], finding["severity"], finding["cost_fraction"],
                        check["predicted_speedup"], check["experiment"], check["measured_speedup"], ci,
                        check["verdict"], check["ratio"]))
    return rows


def calibrate(scripts, out_dir: Path, budget_s: float, on_row=lambda row: None) -> list[Row]:
    rows = []
    for index, (script, args) in enumerate(scripts):
        out = out_dir / f"{index:02d}-{Path(script).stem}"
        found = rows_of(script, diagnose_script(ROOT / script, tuple(args), out, budget_s))
        for row in found:
            on_row(row)
        rows += found
    return rows


def cells(r: Row) -> dict[str, str]:
    """One row of the table, by column (benchmarks/results/calibration.jsonl keeps the same)."""
    measured = f"{r.measured:.2f}x [{r.ci[0]:.2f}-{r.ci[1]:.2f}]" if r.measured and r.ci else "not measured"
    return {"script": Path(r.script).name, "finding": r.rule, "severity": r.severity, "cost": f"{r.cost:.0%}",
            "predicted": f"{r.predicted:.2f}x", "experiment": r.experiment or "-", "measured [99%]": measured,
            "predicted/measured": f"{r.ratio:.2f} ({r.verdict})" if r.ratio is not None else "-"}


def markdown(rows: list[Row]) -> str:
    lines = ["| script | finding | severity | cost | predicted | experiment | measured [99%] | predicted/measured |",
             "| --- | --- | --- | ---: | ---: | --- | --- | ---: |"]
    lines += ["| " + " | ".join(cells(r).values()) + " |" for r in rows]
    return "\n".join(lines)


def record(rows: list[Row], path: Path, budget_s: float) -> None:
    """Append the rows to a results file (benchmarks/tables.py renders it into benchmarks/README.md)."""
    import datetime

    from machine import commit, machine

    date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d")
    command = "benchmarks/calibration.py " + " ".join(sys.argv[1:]) + f" (budget {budget_s:.0f} s a script)"
    at = {"commit": commit(), "date": date, "machine": machine(), "command": command}
    with path.open("a") as file:
        file.writelines(json.dumps({**at, "cells": cells(r)}) + "\n" for r in rows)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("scripts", nargs="*", help="scripts to run (default: the bundled CPU samples)")
    parser.add_argument("--budget-seconds", type=float, default=120.0)
    parser.add_argument("--out", type=Path, default=None, help="folder for the run folders (default: a temporary one)")
    parser.add_argument("--markdown", type=Path, default=None, help="write the table here too")
    parser.add_argument("--record", type=Path, default=None,
                        help="append the rows to this results file (benchmarks/results/calibration.jsonl)")
    args = parser.parse_args()
    scripts = [(s, ()) for s in args.scripts] or list(SAMPLES)
    out = args.out or Path(tempfile.mkdtemp(prefix="calibration-"))
    rows = calibrate(scripts, out, args.budget_seconds,
                     lambda r: print(f"{r.script}: {r.rule} cost {r.cost:.0%} predicted {r.predicted:.2f}x, "
                                     f"measured {r.measured or 0:.2f}x ({r.verdict})", flush=True))
    table = markdown(rows)
    print(table)
    if args.markdown:
        args.markdown.write_text(table + "\n")
    if args.record:
        record(rows, args.record, args.budget_seconds)
    off = [r for r in rows if r.verdict in ("over-predicted", "under-predicted")]
    print(f"{len(rows) - len(off)} of {len(rows)} predictions within 2x of their experiment"
          f" ({sum(r.measured is not None for r in rows)} measured); run folders in {out}")
    return 1 if off else 0


if __name__ == "__main__":
    sys.exit(main())
