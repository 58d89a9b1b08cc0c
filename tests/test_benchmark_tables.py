"""benchmarks/tables.py: the README's benchmark tables are what benchmarks/results/ records give (the check CI
runs), and the figures it derives (events/s, MB/s past start-up, per event vs generated, HTA/diagnose) follow
their definitions in benchmarks/README.md."""
from __future__ import annotations

import importlib.util
import json
import subprocess
import sys

import pytest
from conftest import REPO

# by its file, under a name of its own: `tables` is also PyTables' import name
_spec = importlib.util.spec_from_file_location("benchmark_tables", REPO / "benchmarks" / "tables.py")
tables = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(tables)


@pytest.mark.full  # starts processes (a whole run, the CLI, a script): the full tier
def test_the_readme_tables_are_what_the_results_files_give():
    done = subprocess.run([sys.executable, str(REPO / "benchmarks" / "tables.py"), "--check"], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr


def _timing(tool, trace, kind, events, seconds, **extra):
    return {"commit": "abc1234", "date": "2026-12-05", "machine": "2-core Test CPU, 8 GiB", "tool": tool,
            "trace": trace, "kind": kind, "events": events, "bytes": events * 300, "seconds": seconds, "min": None,
            "max": None, "peak_mib": 100.0, "repeats": 3, "command": "benchmarks/compare.py ...", **extra}


def _rows(text: str) -> dict[str, dict[str, str]]:
    lines = [line for line in text.splitlines() if line.startswith("|")]
    split = lambda line: [cell.strip() for cell in line.strip("|").split(" | ")]  # noqa: E731
    header = split(lines[0])
    return {row[0]: dict(zip(header, row)) for row in map(split, lines[2:])}


def test_the_derived_columns_follow_their_definitions():
    records = [
        _timing("diagnose", "tiny.json.gz", "startup", 30, 0.5),
        _timing("diagnose", "synthetic_1m.json.gz", "generated", 1_000_000, 2.5),
        _timing("hta", "synthetic_1m.json.gz", "generated", 1_000_000, 25.0, peak_mib=1000.0),
        _timing("diagnose", "real_1m.json.gz", "real", 1_200_000, 4.5),  # 1.2x the events: its size
        _timing("diagnose", "real_4m.json.gz", "real", 4_000_000, 9.0),  # no generated trace near 4M
    ]
    rows = _rows(tables.render(records))
    assert "tiny.json.gz" not in rows  # the start-up is a baseline, not a row
    generated, real, alone = rows["synthetic_1m.json.gz"], rows["real_1m.json.gz"], rows["real_4m.json.gz"]
    assert generated["events/s"] == "400k" and generated["MB/s"] == "120"  # 300 MB in 2.5 s
    assert generated["MB/s past start-up"] == "150"  # 300 MB in 2.5 - 0.5 s
    assert generated["HTA/diagnose time, memory"] == "10.0x, 10.0x"
    assert real["per event vs generated"] == "1.5" and generated["per event vs generated"] == "1"
    assert alone["per event vs generated"] == "-" and alone["HTA s / MiB"] == "-"
    assert generated["commit"] == "abc1234" and generated["machine"] == "2-core Test CPU, 8 GiB"
    # another machine's generated trace or start-up is no baseline
    moved = [dict(r, machine="another") if r["kind"] != "real" else r for r in records]
    assert "per event vs generated" not in _rows(tables.render(moved))["real_1m.json.gz"]


def test_the_check_fails_on_a_table_the_records_do_not_give(tmp_path):
    results = tmp_path / "results"
    results.mkdir()
    (results / "speed.jsonl").write_text(json.dumps(_timing("diagnose", "synthetic.json.gz", "generated", 1000, 1.0))
                                         + "\n")
    readme = tmp_path / "README.md"
    readme.write_text("# B\n\n<!-- table:speed -->\n| hand | written |\n<!-- /table:speed -->\n")
    check = ["--readme", str(readme), "--results", str(results)]
    assert tables.main([*check, "--check"]) == 1
    assert tables.main(check) == 0 and "synthetic.json.gz" in readme.read_text()
    assert tables.main([*check, "--check"]) == 0
    (results / "orphan.jsonl").write_text("")  # a results file no table shows
    assert tables.main([*check, "--check"]) == 1


@pytest.mark.full  # starts processes (a whole run, the CLI, a script): the full tier
def test_compare_writes_the_records_the_tables_read(tmp_path):
    """compare.py --record on two small test traces (diagnose only, one run each), with a start-up trace."""
    record = tmp_path / "speed.jsonl"
    done = subprocess.run([sys.executable, str(REPO / "benchmarks" / "compare.py"),
                           str(REPO / "tests/data/traces/cpu_only_with_dataloader.json.gz"), "--tools", "diagnose",
                           "--repeat", "1", "--pause", "0", "--record", str(record), "--startup-trace",
                           str(REPO / "tests/data/traces/cpu_only_gloo_rank34.json.gz")],
                          capture_output=True, text=True, timeout=240, cwd=REPO)
    assert done.returncode == 0, done.stderr[-3000:]
    startup, real = tables.read_records(record)
    assert startup["kind"] == "startup" and real["kind"] == "real"
    assert real["trace"] == "cpu_only_with_dataloader.json.gz"
    for r in (startup, real):
        assert set(r) >= {"commit", "date", "machine", "tool", "trace", "events", "bytes", "seconds", "min", "max",
                          "peak_mib", "repeats", "command"}
        assert r["tool"] == "diagnose" and r["repeats"] == 1 and r["events"] > 0 and r["bytes"] > 0
        assert r["machine"].split("-core ")[0].isdigit() and "--record" in r["command"]
    assert "cpu_only_with_dataloader.json.gz" in tables.render([startup, real])
