"""`diagnose compare A B` and `diagnose run --baseline`: B against A, written as compare.json and compare.html."""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Optional

from rich.console import Console

from diagnose.commands.analyze import no_gc, stem
from diagnose.commands.output import check_out_dir, new_run_dir
from diagnose.commands.rules import load_rules
from diagnose.compare.diff import compare_sides
from diagnose.compare.sides import LoadedSide, load_side
from diagnose.model import Comparison
from diagnose.record.run_record import RunRecord
from diagnose.report.comparison import print_comparison, write_compare_html
from diagnose.rules import Rule
from diagnose.serial import dumps

EXIT_SLOWER = 4  # --fail-if-slower: B is slower than A by more than allowed, beyond the noise


def compare_command(a_path: Path, b_path: Path, *, out: Optional[str], rules_dirs: tuple[str, ...],
                    templates_dir: Optional[str], as_json: bool, force: bool, fail_if_slower: Optional[float],
                    run_noise: Optional[float] = None) -> int:
    return compare_and_report(a_path, b_path, out=out, rules_dirs=rules_dirs, templates_dir=templates_dir,
                              as_json=as_json, force=force, fail_if_slower=fail_if_slower, run_noise=run_noise)[2]


def compare_and_report(a_path: Path, b_path: Path, *, out: Optional[str], rules_dirs: tuple[str, ...] = (),
                       templates_dir: Optional[str] = None, as_json: bool = False, force: bool = False,
                       fail_if_slower: Optional[float] = None,
                       run_noise: Optional[float] = None) -> tuple[Comparison, Path, int]:
    """The comparison as `diagnose compare` prints it; the comparison, its folder and the exit code."""
    check_out_dir(out)  # before the parsing: a refusal costs nothing
    rules = load_rules(rules_dirs)
    console = Console(stderr=True)
    with console.status("reading A and B"), no_gc():
        a = load_side(a_path, "A", rules)
        b = load_side(b_path, "B", rules)
    comparison = compare_sides(a, b, force=force, fail_if_slower_pct=fail_if_slower, run_noise_pct=run_noise)
    out_dir = new_run_dir(out, f"compare-{stem(a_path.resolve())}-vs-{stem(b_path.resolve())}")
    return comparison, out_dir, write_comparison(console, out_dir, comparison, templates_dir, as_json)


def compare_with_baseline(console: Console, baseline: LoadedSide, run_dir: Path, rules: list[Rule],
                          templates_dir: Optional[str], fail_if_slower: Optional[float],
                          run_noise: Optional[float]) -> int:
    """After `diagnose run --baseline`: this run (B) against the baseline (A), into the run folder."""
    with no_gc():
        this_run = load_side(run_dir, "this run", rules)
    comparison = compare_sides(baseline, this_run, force=True, fail_if_slower_pct=fail_if_slower,
                               run_noise_pct=run_noise)
    console.print()
    return write_comparison(console, run_dir, comparison, templates_dir, False)


def write_comparison(console: Console, out_dir: Path, comparison: Comparison, templates_dir: Optional[str],
                     as_json: bool) -> int:
    RunRecord(out_dir).save_comparison(comparison)
    html = write_compare_html(out_dir, comparison, templates_dir)
    print_comparison(console, comparison, html)
    if as_json:
        sys.stdout.write(dumps(comparison).decode() + "\n")
    return EXIT_SLOWER if comparison.gate is not None and comparison.gate.failed else 0

