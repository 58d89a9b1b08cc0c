"""Run folders recorded from real `diagnose run`s of the bundled samples (tests/data/runs/NAME): the quick tier
analyses, diagnoses and reports them again in this process (`diagnose report`, the capture's files as the run left
them), so the stages after the capture are tested on real inputs without a script's start-up; the full tier runs
each sample again and checks that a run still writes what its record holds.

`python tests/recorded_runs.py [NAME ...]` records them anew (all by default). A record is the run folder as the
run wrote it, with two changes that make it a folder one can move: the trace is gzipped under a fixed name, and the
paths of the repository and of the run folder are written as {REPO} and {RUN} (put back by `relocate`)."""
from __future__ import annotations

import gzip
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
RUNS = Path(__file__).resolve().parent / "data" / "runs"
REPO_TOKEN, RUN_TOKEN = "{REPO}", "{RUN}"
TEXT_SUFFIXES = (".json", ".html", ".log", ".md", ".patch", ".css", ".txt")
FAST = ("--warmup", "3", "--steps", "8", "--experiments", "none")
# what the stages after the capture write: `diagnose report` writes them again from the rest
DERIVED = ("analysis.json", "diagnosis.json", "report.html", "report.css")
RENDERED = ("report.html", "report.css")  # not kept: the tests render them again, and they are mostly the same CSS


@dataclass(frozen=True)
class Recorded:
    name: str
    script: str  # relative to the repository
    args: tuple[str, ...] = ()
    options: tuple[str, ...] = FAST

    def command(self, out: Path) -> list[str]:
        return [sys.executable, "-m", "diagnose", "run", "--out", str(out), *self.options, self.script, *self.args]


RECORDED = {r.name: r for r in (
    Recorded("slow_loader", "sample_runs/slow_loader.py"),
    Recorded("tiny_batch", "sample_runs/tiny_batch.py"),
    Recorded("host_overhead", "sample_runs/host_overhead.py"),
    Recorded("healthy", "sample_runs/healthy.py"),
    Recorded("cpu_preprocessing", "sample_runs/cpu_preprocessing.py"),
    Recorded("manual_update", "sample_runs/manual_update.py"),
    Recorded("args_and_import", "sample_runs/args_and_import/train.py", ("--", "--lr", "0.01", "256")),
    Recorded("ddp_straggler", "sample_runs/ddp_straggler.py", options=(*FAST, "--nproc-per-node", "2")),
    Recorded("slow_loader_experiments", "sample_runs/slow_loader.py",
             options=("--warmup", "3", "--steps", "8", "--budget-seconds", "40")),
)}


def run_fresh(recorded: Recorded, out: Path, timeout: float = 300) -> subprocess.CompletedProcess:
    """The recorded command, run today from the repository's folder (as the record was made)."""
    return subprocess.run(recorded.command(out), cwd=REPO, capture_output=True, text=True, timeout=timeout)


def record(recorded: Recorded) -> Path:
    with tempfile.TemporaryDirectory() as work:
        run_dir = Path(work) / "run"
        proc = run_fresh(recorded, run_dir)
        if proc.returncode != 0:
            raise SystemExit(f"{recorded.name}: diagnose run exited {proc.returncode}\n{proc.stderr}")
        target = RUNS / recorded.name
        shutil.rmtree(target, ignore_errors=True)
        shutil.copytree(run_dir, target, ignore=shutil.ignore_patterns("*.fifo", "sandbox", *RENDERED))
        _gzip_traces(target)
        _replace_in_texts(target, {str(run_dir): RUN_TOKEN, str(REPO): REPO_TOKEN})
    return target


def relocate(name: str, dest: Path, derived: bool = True) -> Path:
    """A copy of the record at `dest`, its paths those of this repository and of `dest`; without the files the
    stages after the capture wrote when `derived` is False."""
    ignore = shutil.ignore_patterns(*DERIVED) if not derived else None
    shutil.copytree(RUNS / name, dest, ignore=ignore)
    _replace_in_texts(dest, {RUN_TOKEN: str(dest), REPO_TOKEN: str(REPO)})
    return dest


def _gzip_traces(folder: Path) -> None:
    """Each trace as rankN.recorded.pt.trace.json.gz: its name's middle part is a process id and a time."""
    for trace in folder.rglob("*.pt.trace.json"):
        named = trace.with_name(f"{trace.name.split('.')[0]}.recorded.pt.trace.json.gz")
        with trace.open("rb") as source, gzip.open(named, "wb", compresslevel=9) as target:
            shutil.copyfileobj(source, target)
        trace.unlink()


def _replace_in_texts(folder: Path, replacements: dict[str, str]) -> None:
    for path in folder.rglob("*"):
        if path.is_file() and path.name.endswith(TEXT_SUFFIXES):
            text = path.read_text()
            for old, new in replacements.items():
                text = text.replace(old, new)
            path.write_text(text)


if __name__ == "__main__":
    for name in sys.argv[1:] or RECORDED:
        print(f"recording {name} ...", flush=True)
        print(f"  {record(RECORDED[name])}", flush=True)
