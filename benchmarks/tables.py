"""Render the results files (benchmarks/results/NAME.jsonl) as the markdown tables of benchmarks/README.md.

Each table sits between `<!-- table:NAME -->` and `<!-- /table:NAME -->` in the README; this script rewrites what
lies between them from the records, newest first (a file's last records on top). `--check` rewrites nothing and
exits 1 when a table in the README differs from what its records give, or a results file has no markers, or
markers have no results file (tests/test_benchmark_tables.py runs it).

Two kinds of records (see benchmarks/README.md, "Results files"):

- a timing, one (trace, tool) that `compare.py --record` timed: commit, date, machine, tool, trace, kind
  (generated | real | startup), events, bytes, seconds (median), min, max, peak_mib, repeats, command. One row per
  (commit, machine, trace), its tools side by side, with the figures derived here:
    events/s                events / diagnose's seconds
    MB/s                    bytes of JSON (uncompressed) / diagnose's seconds, start-up included
    MB/s past start-up      bytes / (seconds - the start-up's seconds), where a `startup` record (diagnose on a
                            tiny trace, `compare.py --startup-trace`) has the same commit and machine
    per event vs generated  (seconds / events) over the same for the generated trace nearest in events, at the
                            same commit and machine, where the larger count is at most 1.3 times the smaller
    HTA/diagnose            HTA's seconds and peak over diagnose's, where both ran at the same commit and machine
- a row as written, {commit, date, machine, command, cells: {column: text}}: tables whose measurements are not
  compare.py's (paired runs, calibration, GPU checks), kept with their figures as they were written.

A record may carry a `note`: it is listed under the table (one line per distinct note).

Usage: python benchmarks/tables.py [--check] [--readme benchmarks/README.md] [--results benchmarks/results]
"""
from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
README = HERE / "README.md"
RESULTS = HERE / "results"
SIMILAR_EVENTS = 1.3  # a generated trace "of the same size": the larger event count at most 1.3x the smaller
MARKERS = re.compile(r"(<!-- table:([\w-]+) -->\n)(.*?)(<!-- /table:\2 -->)", re.S)


def read_records(path: Path) -> list[dict]:
    records = []
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        if line.strip():
            try:
                records.append(json.loads(line))
            except ValueError as exc:
                raise SystemExit(f"{path}:{number}: not JSON: {exc}") from exc
    return records


# ------------------------------------------------------------------------------------------------ formatting


def num(value) -> str:
    """A figure as written: at most two decimals, trailing zeros dropped (0.32, 86.9, 1425)."""
    if value is None:
        return "-"
    return f"{round(float(value), 2):.2f}".rstrip("0").rstrip(".")


def count(value) -> str:
    return "-" if value is None else f"{int(value):,}"


def size(nbytes) -> str:
    if not nbytes:
        return "-"
    return f"{num(nbytes / 1e9)} GB" if nbytes >= 1e9 else f"{num(round(nbytes / 1e6))} MB"


def rate(value) -> str:
    """events/s: 75k, 1.2M."""
    if value is None:
        return "-"
    return f"{value / 1e6:.1f}M" if value >= 1e6 else f"{value / 1e3:.0f}k"


def mbps(nbytes, seconds) -> str:
    return f"{nbytes / 1e6 / seconds:.0f}" if nbytes and seconds else "-"


def ratio(value) -> str:
    return "-" if value is None else f"{value:.1f}x"


def seconds_cell(r: dict | None) -> str:
    if r is None:
        return "-"
    spread = f" ({num(r['min'])}-{num(r['max'])})" if r.get("min") is not None and r.get("max") is not None else ""
    peak = f" / {num(r['peak_mib'])}" if r.get("peak_mib") is not None else ""
    return f"{num(r['seconds'])}{peak}{spread}"


def markdown(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "| " + " | ".join("---" for _ in header) + " |"]
    lines += ["| " + " | ".join(cell.replace("|", "\\|") for cell in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def newest_first(keys: list) -> list:
    """Keys (in the file's order) by block of one commit and machine, the last block first, each block's rows in
    the order they were recorded (the traces of one call from small to big)."""
    blocks: dict[tuple, list] = {}
    for key in keys:
        blocks.setdefault(key[:2], []).append(key)
    return [key for block in reversed(list(blocks.values())) for key in block]


def notes(records: list[dict]) -> str:
    said = list(dict.fromkeys(f"{r['commit']}: {r['note']}" for r in reversed(records) if r.get("note")))
    return "".join(f"\n- {line}" for line in said) + ("\n" if said else "")


# ------------------------------------------------------------------------------------------------ timings


def _same_place(r: dict) -> tuple:
    return r["commit"], r["machine"]


def startup_s(records: list[dict]) -> dict[tuple, float]:
    """(commit, machine) -> diagnose's seconds on the start-up trace."""
    return {_same_place(r): r["seconds"] for r in records if r.get("kind") == "startup" and r["tool"] == "diagnose"}


def per_event_vs_generated(r: dict, records: list[dict]) -> float | None:
    if r.get("kind") == "generated":
        return 1.0
    if not r.get("events") or not r.get("seconds"):
        return None
    near = [g for g in records if g.get("kind") == "generated" and g["tool"] == r["tool"] and
            _same_place(g) == _same_place(r) and g.get("events") and g.get("seconds") and
            max(g["events"], r["events"]) <= SIMILAR_EVENTS * min(g["events"], r["events"])]
    if not near:
        return None
    g = min(near, key=lambda g: abs(g["events"] - r["events"]))
    return (r["seconds"] / r["events"]) / (g["seconds"] / g["events"])


def timing_table(records: list[dict]) -> str:
    timed = [r for r in records if r.get("kind") != "startup"]
    rows: dict[tuple, dict[str, dict]] = {}
    for r in timed:
        rows.setdefault((r["commit"], r["machine"], r["trace"]), {})[r["tool"]] = r
    others = [t for t in dict.fromkeys(r["tool"] for r in timed) if t != "diagnose"]
    startups = startup_s(records)
    past_startup = any(place[:2] in startups for place in rows)
    vs_generated = any(r.get("kind") == "real" and per_event_vs_generated(r, records) is not None
                       for r in timed if r["tool"] == "diagnose")
    header = ["trace", "events", "JSON", "diagnose s / MiB", "events/s", "MB/s"]
    header += ["MB/s past start-up"] * past_startup + ["per event vs generated"] * vs_generated
    for tool in others:
        header += [f"{tool.upper() if tool == 'hta' else tool} s / MiB",
                   f"{tool.upper() if tool == 'hta' else tool}/diagnose time, memory"]
    header += ["commit", "machine", "date"]
    lines = []
    for commit, machine, trace in newest_first(list(rows)):
        tools = rows[(commit, machine, trace)]
        d = tools.get("diagnose")
        first = next(iter(tools.values()))
        events, nbytes = first.get("events"), first.get("bytes")
        secs = d["seconds"] if d else None
        row = [trace, count(events), size(nbytes), seconds_cell(d),
               rate(events / secs) if events and secs else "-", mbps(nbytes, secs)]
        if past_startup:
            base = startups.get((commit, machine))
            row.append(mbps(nbytes, secs - base) if secs and base is not None and secs > base else "-")
        if vs_generated:
            per = per_event_vs_generated(d, records) if d else None
            row.append("-" if per is None else f"{per:.2f}".rstrip("0").rstrip("."))
        for tool in others:
            o = tools.get(tool)
            row.append(seconds_cell(o))
            if o and d and d.get("seconds"):
                memory = (o["peak_mib"] / d["peak_mib"] if o.get("peak_mib") and d.get("peak_mib") else None)
                row.append(ratio(o["seconds"] / d["seconds"]) + (f", {ratio(memory)}" if memory else ""))
            else:
                row.append("-")
        row += [commit, machine, first.get("date") or "-"]
        lines.append(row)
    return markdown(header, lines) + notes(records)


# ------------------------------------------------------------------------------------------------ rows as written


def cells_table(records: list[dict]) -> str:
    header = list(dict.fromkeys(column for r in records for column in r["cells"]))
    order = newest_first([(r["commit"], r["machine"], at) for at, r in enumerate(records)])
    rows = [[r["cells"].get(column, "") for column in header] + [r["commit"], r["machine"], r.get("date") or "-"]
            for r in (records[at] for *_, at in order)]
    return markdown(header + ["commit", "machine", "date"], rows) + notes(records)


def render(records: list[dict]) -> str:
    if not records:
        return "(no records yet)\n"
    return cells_table(records) if all("cells" in r for r in records) else timing_table(records)


# ------------------------------------------------------------------------------------------------ the README


def rendered_readme(readme_text: str, results: Path) -> tuple[str, list[str]]:
    """The README with every table rewritten from its records, and the problems found (markers without results,
    results without markers)."""
    files = {p.stem: p for p in sorted(results.glob("*.jsonl"))}
    problems, seen = [], set()

    def table(match: re.Match) -> str:
        name = match.group(2)
        seen.add(name)
        if name not in files:
            problems.append(f"<!-- table:{name} --> has no {results.name}/{name}.jsonl")
            return match.group(0)
        return match.group(1) + render(read_records(files[name])) + match.group(4)

    text = MARKERS.sub(table, readme_text)
    problems += [f"{results.name}/{name}.jsonl has no <!-- table:{name} --> in the README"
                 for name in files if name not in seen]
    return text, problems


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 if a table is not current")
    parser.add_argument("--readme", type=Path, default=README)
    parser.add_argument("--results", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    before = args.readme.read_text()
    after, problems = rendered_readme(before, args.results)
    stale = [m.group(2) for m in MARKERS.finditer(before)
             if m.group(0) not in after]  # a table whose text the records change
    for problem in problems:
        print(problem, file=sys.stderr)
    if args.check:
        if stale:
            print(f"not current with benchmarks/results: {', '.join(stale)}; run `python benchmarks/tables.py`",
                  file=sys.stderr)
        return 1 if stale or problems else 0
    if after != before:
        args.readme.write_text(after)
        print(f"rewrote {', '.join(stale)} in {args.readme}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
