"""Time diagnose against HolisticTraceAnalysis and torch-tb-profiler on the same trace files.

Every measurement is a fresh child process, timed whole: interpreter start, imports, reading and analysing
the trace, exit. Its peak memory is the child's ru_maxrss as os.wait4 returns it (the largest RSS of the
child and of any descendant it waited for, and at least this script's own peak, which Linux hands every child it
starts: this script therefore never reads a trace itself, and prints its own peak under the table). The tools
run interleaved (diagnose, hta, tb, diagnose, ...) --repeat times; the table shows medians. Each timed run starts
--pause seconds after the last ended: right after HTA freed its memory, the kernel's reclaim took the cores the
next run needed (diagnose's 216k-event run: 0.43-0.44 s straight after HTA's, 0.38 s alone or after a pause of
2 s; HTA's own runs were faster too, 4.0 s against 4.3 s).

What each tool runs:
  diagnose  python -m diagnose analyze TRACE --out NEWDIR
            (where `python -m diagnose analyze --help` fails: load_trace + analyze in `python -c`)
  hta       TraceAnalysis(trace_dir=DIR).get_temporal_breakdown(visualize=False), DIR holding a link to TRACE
  tb        torch-tb-profiler 0.4.3: RunProfileData.parse + RunGenerator.generate_run_profile, what its
            RunLoader runs for each worker file (without a TensorBoard server)

Usage:
  python benchmarks/compare.py TRACE [TRACE ...] [--repeat 3] [--tools diagnose,hta,tb]
      [--hta-python .bench-venv/bin/python] [--json out.json]
      [--record benchmarks/results/NAME.jsonl [--startup-trace tests/data/traces/cpu_only_gloo_rank34.json.gz]]

--record appends one JSON line per (trace, tool) timed (commit, date, machine, events, bytes of JSON, median,
min and max seconds, peak MiB, repeats, the command): benchmarks/tables.py renders that file into README.md.
--startup-trace first times `diagnose analyze` on a tiny trace, recorded as kind "startup": the start-up that
"MB/s past start-up" takes off. A trace whose file name starts with "synthetic" (make_trace.py's, as the README
names them) is recorded as kind "generated", any other as "real".
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import resource
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from machine import commit, machine

ROOT = Path(__file__).resolve().parents[1]
BENCH_VENV_PY = ROOT / ".bench-venv" / "bin" / "python"
TOOLS = ("diagnose", "hta", "tb")

DIAGNOSE_STANDIN = """\
import sys
from pathlib import Path
from diagnose.trace.load import load_trace
from diagnose.analysis.analyze import Inputs, analyze
a = analyze(Inputs(load_trace(Path(sys.argv[1]))))
print("steps=%d gpu_busy_frac=%.4f" % (len(a.steps), a.metrics.get("gpu_busy_frac") or 0))
"""

HTA_CODE = """\
import sys
from hta.trace_analysis import TraceAnalysis
df = TraceAnalysis(trace_dir=sys.argv[1]).get_temporal_breakdown(visualize=False)
row = df.iloc[0]
print("compute_pctg=%s idle_pctg=%s" % (row["compute_time_pctg"], row["idle_time_pctg"]))
"""

TB_CODE = """\
import sys, tempfile
from torch_tb_profiler.profiler.data import DistributedRunProfileData, RunProfileData
from torch_tb_profiler.profiler.run_generator import RunGenerator
with tempfile.TemporaryDirectory() as cache_dir:
    data = RunProfileData.parse("worker0", None, sys.argv[1], cache_dir)
    profile = RunGenerator("worker0", None, data).generate_run_profile()
    DistributedRunProfileData(data)
step = profile.overview["performance"][0]
print("steps=%d " % len(data.steps_names) + " ".join("%s=%s%%" % (c["name"].replace(" ", "_"), c["extra"])
                                                   for c in step["children"] if c["name"] in ("Kernel", "CPU Exec")))
"""

IMPORT_CHECK = {
    "hta": ("import hta.trace_analysis",
            "HolisticTraceAnalysis is not importable by {py}. Install it in a separate venv, then pass it:\n"
            "    python3 -m venv .bench-venv && .bench-venv/bin/pip install -c constraints.txt "
            "HolisticTraceAnalysis\n    python benchmarks/compare.py ... --hta-python .bench-venv/bin/python"),
    "tb": ("import torch_tb_profiler.profiler.data, torch_tb_profiler.profiler.run_generator",
           "torch-tb-profiler is not importable by {py}: pip install torch-tb-profiler==0.4.3 "
           "(it is a dependency of diagnose), or pass --tb-python PATH"),
    "diagnose": ("import diagnose.analysis",
                 "diagnose is not importable by {py}: pip install -e . in the project venv, or pass "
                 "--diagnose-python PATH"),
}


CHILD_ENV = dict(os.environ)


def run_child(argv: list[str], timeout: float, cwd: str | None = None) -> dict:
    """Run argv to completion; wall seconds and the child's peak RSS (MiB) from os.wait4."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        start = time.perf_counter()
        proc = subprocess.Popen(argv, stdout=out, stderr=err, stdin=subprocess.DEVNULL, cwd=cwd, env=CHILD_ENV)
        killed = []
        timer = threading.Timer(timeout, lambda: (killed.append(True), proc.send_signal(signal.SIGKILL)))
        timer.start()
        try:
            _, status, usage = os.wait4(proc.pid, 0)
        finally:
            timer.cancel()
        seconds = time.perf_counter() - start
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        stdout = out.read().decode(errors="replace")
        stderr = err.read().decode(errors="replace")
    last_line = (stdout.strip().splitlines() or [""])[-1]
    return {"seconds": seconds, "peak_rss_mib": usage.ru_maxrss / 1024.0, "rc": proc.returncode,
            "timed_out": bool(killed), "stdout": last_line[:200], "stderr_tail": stderr[-2000:]}


def importable(py: str, tool: str) -> bool:
    code, _ = IMPORT_CHECK[tool]
    try:
        return subprocess.run([py, "-c", code], capture_output=True, timeout=300).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def has_analyze_command(py: str) -> bool:
    try:
        result = subprocess.run([py, "-m", "diagnose", "analyze", "--help"], capture_output=True, timeout=300,
                                cwd=str(ROOT))
    except (OSError, subprocess.TimeoutExpired):
        return False
    return result.returncode == 0


def count_events(trace: Path, timeout: float = 600) -> tuple[int | None, int | None]:
    """Number of traceEvents and bytes of JSON (uncompressed), for the table, counted in a child process. Not in
    this one: Linux gives a child the peak RSS of the process that spawned it (ru_maxrss keeps the pre-exec memory's
    high-water mark, and subprocess starts children by vfork, whose pre-exec memory is this process's), so a trace
    parsed here would raise every later measurement to this process's peak (it did: 453 MiB reported for a run whose
    own peak was 240 MiB)."""
    try:
        done = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--count-events", str(trace)],
                              capture_output=True, text=True, timeout=timeout, env=CHILD_ENV)
        events, _, nbytes = done.stdout.strip().partition(" ")
        if done.returncode != 0:
            return None, None
        return (int(events) if events.isdigit() else None), (int(nbytes) if nbytes.isdigit() else None)
    except (subprocess.TimeoutExpired, OSError):
        return None, None


def own_peak_rss_mib() -> float:
    """This process's own high-water mark (VmHWM), what its children inherit; getrusage's ru_maxrss would also
    hold what this process inherited from the one that started it (pytest's, say)."""
    try:
        with open("/proc/self/status") as status:
            return next(int(line.split()[1]) for line in status if line.startswith("VmHWM")) / 1024.0
    except (OSError, StopIteration, ValueError):  # not Linux: the nearest figure there is
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def _count_events_here(trace: Path) -> tuple[int | None, int | None]:
    """(events, bytes of JSON). A text over 256 MB is not parsed whole (a 10 GB one would not fit): its events are
    counted by their "ph" keys, one each."""
    try:
        import gzip
        import zlib

        import orjson
    except ImportError:
        return None, None
    with trace.open("rb") as file:
        gzipped = file.read(2) == b"\x1f\x8b"
    if trace.stat().st_size < (16 << 20 if gzipped else 256 << 20):
        raw = trace.read_bytes()
        text = gzip.decompress(raw) if gzipped else raw
        data = orjson.loads(text)
        events = data.get("traceEvents") if isinstance(data, dict) else data
        return (len(events) if isinstance(events, list) else None), len(text)
    count, nbytes, tail = 0, 0, b""
    inflate = zlib.decompressobj(16 + zlib.MAX_WBITS) if gzipped else None
    with trace.open("rb") as file:
        while block := file.read(16 << 20):
            text = inflate.decompress(block) if inflate else block
            nbytes += len(text)
            text = tail + text
            count += text.count(b'"ph"')
            tail = text[-3:]  # a key cut between two blocks is counted in the next (it cannot overlap itself)
    return count, nbytes


class Plan:
    """The command line of each tool for one trace, and the folders they need."""

    def __init__(self, trace: Path, pythons: dict[str, str], diagnose_cli: bool, scratch: Path):
        self.trace = trace.resolve()
        self.pythons = pythons
        self.diagnose_cli = diagnose_cli
        self.scratch = scratch
        # HTA reads a folder of rank traces; its name must end in .json or .gz.
        self.hta_dir = scratch / "hta"
        self.hta_dir.mkdir()
        name = self.trace.name if self.trace.name.endswith((".json", ".gz")) else self.trace.name + ".json"
        os.symlink(self.trace, self.hta_dir / name)
        self.runs = 0

    def argv(self, tool: str) -> list[str]:
        py = self.pythons[tool]
        if tool == "diagnose":
            if self.diagnose_cli:
                self.runs += 1
                out = self.scratch / f"diagnose-out-{self.runs}"  # a new folder each run: analyze refuses a full one
                return [py, "-m", "diagnose", "analyze", str(self.trace), "--out", str(out)]
            return [py, "-c", DIAGNOSE_STANDIN, str(self.trace)]
        if tool == "hta":
            return [py, "-c", HTA_CODE, str(self.hta_dir)]
        return [py, "-c", TB_CODE, str(self.trace)]


def diagnosis_summary(out_dir: Path) -> str:
    """What `diagnose analyze` found, read from its diagnosis.json after the run (not timed)."""
    try:
        d = json.loads((out_dir / "diagnosis.json").read_text())
    except (OSError, ValueError):
        return "(no diagnosis.json)"
    busy = (d.get("metrics") or {}).get("gpu_busy_frac")
    return f"steps={d.get('steps_profiled')} gpu_busy_frac={busy if busy is None else round(busy, 4)}"


def summarize(samples: list[dict]) -> dict:
    ok = [s for s in samples if s["rc"] == 0 and not s["timed_out"]]
    if not ok:
        return {"status": "failed", "samples": samples}
    return {"status": "ok", "median_s": statistics.median(s["seconds"] for s in ok),
            "median_peak_rss_mib": statistics.median(s["peak_rss_mib"] for s in ok),
            "max_peak_rss_mib": max(s["peak_rss_mib"] for s in ok),
            "seconds": [round(s["seconds"], 3) for s in ok],
            "peak_rss_mib": [round(s["peak_rss_mib"], 1) for s in ok],
            "output": ok[-1]["stdout"], "failures": len(samples) - len(ok)}


def ratios(results: dict) -> dict:
    d = results.get("diagnose", {})
    out = {}
    if d.get("status") != "ok":
        return out
    for tool in ("hta", "tb"):
        r = results.get(tool, {})
        if r.get("status") == "ok":
            out[f"{tool}_s_over_diagnose_s"] = r["median_s"] / d["median_s"]
            out[f"{tool}_mib_over_diagnose_mib"] = r["median_peak_rss_mib"] / d["median_peak_rss_mib"]
    return out


def records(entry: dict, report: dict, command: str, kind: str | None = None) -> list[dict]:
    """One results-file record per tool that ran (benchmarks/tables.py renders them)."""
    name = Path(entry["trace"]).name
    kind = kind or ("generated" if name.startswith("synthetic") else "real")
    out = []
    for tool, r in entry["tools"].items():
        if r["status"] != "ok":
            continue
        out.append({"commit": report["diagnose_commit"], "date": report["date"], "machine": report["machine_name"],
                    "tool": tool, "trace": name, "kind": kind, "events": entry["events"], "bytes": entry["bytes"],
                    "seconds": round(r["median_s"], 3), "min": round(min(r["seconds"]), 3),
                    "max": round(max(r["seconds"]), 3), "peak_mib": round(r["median_peak_rss_mib"], 1),
                    "repeats": len(r["seconds"]), "command": command})
    return out


def append_records(path: Path, new: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as file:
        file.writelines(json.dumps(record) + "\n" for record in new)


def print_table(entry: dict) -> None:
    events = entry["events"]
    print(f"\n{entry['trace']}" + (f"  ({events:,} events)" if events else ""))
    print(f"  {'tool':<10} {'median s':>10} {'peak MiB':>10}  {'runs (s)':<28} output")
    for tool, r in entry["tools"].items():
        if r["status"] != "ok":
            print(f"  {tool:<10} {r['status']:>10}  {r.get('reason', '')}")
            continue
        runs = ", ".join(f"{s:.2f}" for s in r["seconds"])
        print(f"  {tool:<10} {r['median_s']:>10.2f} {r['median_peak_rss_mib']:>10.0f}  {runs:<28} {r['output']}")
    rt = entry["ratios"]
    for tool in ("hta", "tb"):
        if f"{tool}_s_over_diagnose_s" in rt:
            print(f"  {tool} / diagnose: time {rt[tool + '_s_over_diagnose_s']:.1f}x, "
                  f"peak memory {rt[tool + '_mib_over_diagnose_mib']:.2f}x")
    if "hta_s_over_diagnose_s" in rt:
        ok = rt["hta_s_over_diagnose_s"] >= 10 and rt["hta_mib_over_diagnose_mib"] >= 1
        print(f"  target (>= 10x faster than HTA, peak memory <= HTA's; issue 20): {'met' if ok else 'NOT met'}")
    sys.stdout.flush()


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    parser.add_argument("traces", nargs="+", type=Path, help="Kineto trace files (.json or .json.gz)")
    parser.add_argument("--repeat", type=int, default=3, help="runs of each tool per trace (default 3)")
    parser.add_argument("--tools", default=",".join(TOOLS), help="comma-separated subset of diagnose,hta,tb")
    parser.add_argument("--python", default=sys.executable, help="interpreter for every tool (default: this one)")
    parser.add_argument("--diagnose-python", help="interpreter for diagnose (default --python)")
    parser.add_argument("--hta-python", help="interpreter that has HolisticTraceAnalysis (default --python, "
                                             "else .bench-venv/bin/python where it has it)")
    parser.add_argument("--tb-python", help="interpreter that has torch-tb-profiler (default --python)")
    parser.add_argument("--timeout", type=float, default=1800, help="seconds one run may take (default 1800)")
    parser.add_argument("--warmup", type=int, default=0, help="untimed runs of each tool per trace first (default 0)")
    parser.add_argument("--pycache-prefix", type=Path,
                        help="let every child read and write bytecode caches under this folder (PYTHONPYCACHEPREFIX, "
                             "PYTHONDONTWRITEBYTECODE unset), as an installed package has them; combine with "
                             "--warmup 1. Without it children inherit this environment as it is")
    parser.add_argument("--pause", type=float, default=2.0,
                        help="seconds to wait before each timed run (default 2): the kernel reclaims the last run's "
                             "memory (HTA's: 0.4-5 GB) in the background, on the cores the next run needs")
    parser.add_argument("--json", type=Path, help="also write the results as JSON here")
    parser.add_argument("--record", type=Path,
                        help="append one record per (trace, tool) timed to this results file "
                             "(benchmarks/results/NAME.jsonl); then run benchmarks/tables.py")
    parser.add_argument("--startup-trace", type=Path,
                        help="time `diagnose analyze` on this tiny trace first (diagnose only), recorded as kind "
                             "startup: the start-up that MB/s past start-up takes off")
    args = parser.parse_args(argv)
    if args.pycache_prefix:
        CHILD_ENV.pop("PYTHONDONTWRITEBYTECODE", None)
        CHILD_ENV["PYTHONPYCACHEPREFIX"] = str(args.pycache_prefix.resolve())

    tools = [t.strip() for t in args.tools.split(",") if t.strip()]
    unknown = [t for t in tools if t not in TOOLS]
    if unknown or not tools:
        parser.error(f"--tools: unknown {', '.join(unknown) or '(none)'}; choose among {', '.join(TOOLS)}")
    missing = [str(t) for t in args.traces + ([args.startup_trace] if args.startup_trace else []) if not t.is_file()]
    if missing:
        parser.error(f"trace not found: {', '.join(missing)}")
    pythons = {"diagnose": args.diagnose_python or args.python, "hta": args.hta_python or args.python,
               "tb": args.tb_python or args.python}

    skipped: dict[str, str] = {}
    for tool in tools:
        if importable(pythons[tool], tool):
            continue
        if tool == "hta" and not args.hta_python and BENCH_VENV_PY.exists() and importable(str(BENCH_VENV_PY), tool):
            pythons[tool] = str(BENCH_VENV_PY)
            continue
        skipped[tool] = IMPORT_CHECK[tool][1].format(py=pythons[tool])
        print(f"skipping {tool}: {skipped[tool]}", file=sys.stderr)
    diagnose_cli = "diagnose" in tools and "diagnose" not in skipped and has_analyze_command(pythons["diagnose"])
    if "diagnose" in tools and "diagnose" not in skipped and not diagnose_cli:
        print("note: `python -m diagnose analyze` is not available; timing load_trace + analyze in "
              "`python -c` instead", file=sys.stderr)
    active = [t for t in tools if t not in skipped]
    print(f"tools: {', '.join(f'{t} ({pythons[t]})' for t in active) or 'none'}; repeat {args.repeat}; "
          f"{os.cpu_count()} CPUs", file=sys.stderr)

    report = {"machine": {"platform": platform.platform(), "cpus": os.cpu_count(), "python": sys.version.split()[0]},
              "bytecode": "cached under " + str(args.pycache_prefix) if args.pycache_prefix else
              ("not written (PYTHONDONTWRITEBYTECODE)" if os.environ.get("PYTHONDONTWRITEBYTECODE") else "default"),
              "warmup": args.warmup, "pause_s": args.pause,
              "diagnose_commit": commit(), "machine_name": machine(),
              "repeat": args.repeat, "pythons": {t: pythons[t] for t in active},
              "diagnose_mode": "cli analyze" if diagnose_cli else "load_trace+analyze stand-in", "traces": [],
              "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d")}
    command = "benchmarks/compare.py " + shlex.join(sys.argv[1:] if argv is None else argv)
    startup = [(args.startup_trace, "startup")] if args.startup_trace and "diagnose" in active else []
    for trace, kind in startup + [(t, None) for t in args.traces]:
        scratch = Path(tempfile.mkdtemp(prefix="diagnose-bench-"))
        try:
            plan = Plan(trace, pythons, diagnose_cli, scratch)
            timing = ["diagnose"] if kind == "startup" else active
            samples: dict[str, list] = {t: [] for t in timing}
            for _ in range(args.warmup):
                for tool in timing:
                    run_child(plan.argv(tool), args.timeout, cwd=str(ROOT))
            for rep in range(args.repeat):
                for tool in timing:  # interleaved: a slow spell of the machine hits every tool alike
                    argv_ = plan.argv(tool)
                    time.sleep(args.pause)  # the kernel done with the last run's memory before this one starts
                    result = run_child(argv_, args.timeout, cwd=str(ROOT))
                    if tool == "diagnose" and diagnose_cli and result["rc"] == 0:
                        result["stdout"] = diagnosis_summary(Path(argv_[-1]))
                    samples[tool].append(result)
                    state = "ok" if result["rc"] == 0 else ("timed out" if result["timed_out"]
                                                            else f"rc {result['rc']}")
                    print(f"  [{trace.name}] {tool} run {rep + 1}/{args.repeat}: {result['seconds']:.2f} s, "
                          f"{result['peak_rss_mib']:.0f} MiB, {state}", file=sys.stderr)
                    if result["rc"] != 0:
                        print(result["stderr_tail"], file=sys.stderr)
            results = {t: summarize(samples[t]) for t in timing}
            for tool, reason in skipped.items():
                results[tool] = {"status": "skipped", "reason": reason.splitlines()[0]}
            for r in results.values():
                if r["status"] == "failed":
                    r["reason"] = "every run failed: " + (r["samples"][-1]["stderr_tail"].strip().splitlines()
                                                          or ["?"])[-1]
            events, nbytes = count_events(trace)
            entry = {"trace": str(trace), "events": events, "bytes": nbytes, "tools": results,
                     "ratios": ratios(results), "kind": kind}
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
        report["traces"].append(entry)
        print_table(entry)
        if args.record:  # each trace as it is done: a long call stopped half-way keeps what it measured
            append_records(args.record, records(entry, report, command, kind))
    # a child's peak is at least this process's own (see count_events): the floor under every peak above
    report["floor_peak_rss_mib"] = round(own_peak_rss_mib(), 1)
    print(f"\n(every peak above includes this script's own peak RSS, {report['floor_peak_rss_mib']:.0f} MiB, which "
          "Linux gives each child it starts)")
    if args.json:
        args.json.write_text(json.dumps(report, indent=2, default=str) + "\n")
        print(f"\nwrote {args.json}")
    if args.record:
        print(f"appended to {args.record}: run `python benchmarks/tables.py` to update benchmarks/README.md")
    return 0 if all(r["status"] != "failed" for e in report["traces"] for r in e["tools"].values()) else 1


if __name__ == "__main__":
    if sys.argv[1:2] == ["--count-events"]:  # count_events' child
        counted, size = _count_events_here(Path(sys.argv[2]))
        print(f"{'' if counted is None else counted} {'' if size is None else size}")
        sys.exit(0)
    sys.exit(main())
