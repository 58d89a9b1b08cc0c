"""Shared helpers: run the real CLI in a subprocess, as a user would, and read what it wrote."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
SAMPLES = REPO / "sample_runs"
SCRIPTS = Path(__file__).resolve().parent / "scripts"
TRACES = Path(__file__).resolve().parent / "data" / "traces"  # trace files and their licences: SOURCES.md
FAST = ("--warmup", "3", "--steps", "8", "--experiments", "none")
BIG_TRACE_BYTES = 1_000_000  # gzipped: the six real A100/V100/H200 traces of a megabyte or more
# Python for a measuring child's peak RSS in bytes, its helper processes included: its own VmHWM, not getrusage's
# ru_maxrss, which a child inherits across exec from the process that started it (pytest held 1.8 GB late in a
# slow tier, and every peak measured read 1.8 GB)
PEAK_BYTES = ("(next(int(l.split()[1]) for l in open('/proc/self/status') if l.startswith('VmHWM')) "
              "+ __import__('resource').getrusage(__import__('resource').RUSAGE_CHILDREN).ru_maxrss) * 1024")


@dataclass
class CliRun:
    returncode: int
    stdout: str
    stderr: str
    run_dir: Path
    seconds: float

    @property
    def diagnosis(self) -> dict:
        return json.loads((self.run_dir / "diagnosis.json").read_text())

    @property
    def findings(self) -> list[dict]:
        return self.diagnosis["findings"]


# commands that read and write files only: run in this process through click's test runner (what `python -m
# diagnose` runs, without the interpreter's and the imports' start-up); `run`, `capture`, `peak` and `compare --live`
# start the user's script or measure the machine: a process of their own
IN_PROCESS = frozenset({"analyze", "report", "compare", "rules", "apply", "sample", "--help", "-h", "--version"})


def diagnose_cli(*args: str, cwd: Path = REPO, timeout: float = 240, env: dict | None = None,
                 own_process: bool = False) -> subprocess.CompletedProcess:
    """The CLI as a user runs it: its exit code, stdout and stderr. `own_process=True` (or a command that runs a
    script) starts `python -m diagnose`; else it runs in this process."""
    if not own_process and args and args[0] in IN_PROCESS and "--live" not in args and "--open" not in args:
        return cli_in_process(*args, cwd=cwd, env=env)
    return subprocess.run([sys.executable, "-m", "diagnose", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, **(env or {})})


def cli_in_process(*args: str, cwd: Path = REPO, env: dict | None = None) -> subprocess.CompletedProcess:
    """diagnose.cli.main in this process, its streams captured by click's test runner, in `cwd` with `env` added;
    an exception from our code ends it as it would end the process: its traceback on stderr, exit code 1."""
    import traceback

    from click.testing import CliRunner

    from diagnose.cli import main

    before = os.getcwd()
    os.chdir(cwd)
    try:
        with CliRunner().isolation(env=env) as (stdout, stderr, _):
            code = 0
            try:
                main(list(args), own_process=False)
            except SystemExit as exc:
                code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
            except Exception:
                traceback.print_exc()
                code = 1
            sys.stdout.flush()
            sys.stderr.flush()
            out, err = stdout.getvalue().decode(), stderr.getvalue().decode()
    finally:
        os.chdir(before)
    return subprocess.CompletedProcess(["diagnose", *args], code, out, err)


def assert_matches_schema(name: str, written: Path) -> None:
    """`written` (a diagnosis.json or compare.json) is what docs/reference/NAME.schema.json says: every field the
    code wrote is described there, of the type said."""
    import jsonschema

    schema = json.loads((REPO / "docs" / "reference" / f"{name}.schema.json").read_text())
    validator = jsonschema.Draft202012Validator(schema)
    errors = [f"{'.'.join(str(p) for p in error.absolute_path) or '(top)'}: {error.message}"
              for error in validator.iter_errors(json.loads(written.read_text()))]
    assert errors == [], f"{written} does not match docs/reference/{name}.schema.json:\n" + "\n".join(errors[:20])


def run_script(script: Path, *script_args: str, out: Path, options: tuple[str, ...] = FAST, cwd: Path = REPO,
               env: dict | None = None, timeout: float | None = None) -> CliRun:
    """`diagnose run` in a subprocess; by default it may take 4 minutes, or its experiment budget and 2 more (the
    capture, the report, a loaded machine's slower start-up)."""
    import time

    if timeout is None:
        budget = float(options[options.index("--budget-seconds") + 1]) if "--budget-seconds" in options else 0.0
        timeout = max(240.0, budget + 120.0)
    start = time.monotonic()
    proc = diagnose_cli("run", "--out", str(out), *options, str(script), *script_args, cwd=cwd, env=env,
                        timeout=timeout)
    return CliRun(proc.returncode, proc.stdout, proc.stderr, out, time.monotonic() - start)


def logged_step_times(command: list[str]) -> dict[int, float]:
    """Run a script plainly and note when each of its "step N " log lines arrived (time.monotonic())."""
    import re
    import time

    seen = {}
    with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True) as process:
        for line in process.stdout:
            match = re.search(r"step (\d+) ", line)
            if match:
                seen[int(match.group(1))] = time.monotonic()
    return seen


def trace_params(paths: list[Path]) -> list:
    """Traces to parametrize a test over, each by its name under tests/data/traces: those of BIG_TRACE_BYTES or more
    in the full tier (seconds each to read whole and streamed), the others in the quick tier, which so still reads
    each layout and device kind (A100 NCCL, H200, MI250, two ranks, CPU)."""
    return [pytest.param(p, id=str(p.relative_to(TRACES)),
                         marks=[pytest.mark.full] if p.stat().st_size >= BIG_TRACE_BYTES else [])
            for p in paths]


def line_of(path: Path, text: str) -> int:
    """1-based number of the first line of `path` containing `text`."""
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        if text in line:
            return number
    raise AssertionError(f"{text!r} not in {path}")


def main_step_count(counter) -> int:
    """The steps a first pass (window.StepCounter) found on the thread the analysis takes them from."""
    from diagnose.trace.kept_steps import main_steps

    return len(main_steps(counter.marks)[1]) if counter.marks else 0


def one_step_and_its_neighbours(counter) -> int:
    """A budget of three average steps' events: a window of one step with its lead-in and lead-out steps."""
    return counter.events * 3 // main_step_count(counter) + 1


def generated_trace(folder: Path, events: int, *options: str, timeout: float = 300) -> Path:
    """A trace of `events` events written by benchmarks/make_trace.py into `folder` (`options`: its own)."""
    path = folder / f"generated_{events}{''.join(options)}.json.gz"
    subprocess.run([sys.executable, str(REPO / "benchmarks" / "make_trace.py"), str(path), "--events", str(events),
                    *options], check=True, capture_output=True, timeout=timeout)
    return path


TIERS = ("full", "slow", "bench")


def pytest_collection_modifyitems(items):
    """A test is in one tier past the quick one: marked twice, two tiers would each run it (and `full` runs two tests
    at a time, which a timed test must not see)."""
    twice = [item.nodeid for item in items if sum(bool(item.get_closest_marker(tier)) for tier in TIERS) > 1]
    if twice:
        raise pytest.UsageError(f"marked for more than one of the tiers {TIERS} (choose one): {twice}")


@pytest.fixture(scope="session")
def two_million_event_trace(tmp_path_factory) -> Path:
    """A generated 2M-event trace (0.6 GB of text; about a minute to write), shared by the slow memory tests."""
    return generated_trace(tmp_path_factory.mktemp("big"), 2_000_000, timeout=600)


@pytest.fixture(scope="session")
def sample_run(tmp_path_factory):
    """Run each bundled sample once per session; tests share the results."""
    cache: dict[tuple, CliRun] = {}

    def get(name: str, *script_args: str, options: tuple[str, ...] = FAST, timeout: float | None = None) -> CliRun:
        key = (name, script_args, options)
        if key not in cache:
            out = tmp_path_factory.mktemp(Path(name).stem) / "run"
            cache[key] = run_script(SAMPLES / name, *script_args, out=out, options=options, timeout=timeout)
        return cache[key]

    return get


@pytest.fixture(scope="session")
def readme_run(sample_run) -> CliRun:
    """The README's main command, `diagnose run sample_runs/slow_loader.py` with its defaults (the experiments and
    their 240 s budget): one timed run that the slow tier's transcript, calibration and report-browser tests read."""
    return sample_run("slow_loader.py", options=(), timeout=480)


@pytest.fixture(scope="session")
def tiny_batch_experiments(sample_run) -> CliRun:
    """tiny_batch.py with the experiments its findings recommend, on a 90 s budget: shared by the batch-size
    experiment's test and the calibration."""
    return sample_run("tiny_batch.py", options=("--budget-seconds", "90"))


@pytest.fixture(scope="session")
def recorded_run(tmp_path_factory):
    """A recorded run of a bundled sample (tests/recorded_runs.py, tests/data/runs/NAME) analysed, diagnosed and
    reported again by `diagnose report` in this process, from the files its capture wrote: the same CliRun a
    `sample_run` gives, without the script's run. Once per session; tests share the results."""
    from recorded_runs import relocate

    cache: dict[str, CliRun] = {}

    def get(name: str) -> CliRun:
        if name not in cache:
            import time

            run_dir = relocate(name, tmp_path_factory.mktemp(name) / "run", derived=False)
            start = time.monotonic()
            proc = cli_in_process("report", str(run_dir))
            cache[name] = CliRun(proc.returncode, proc.stdout, proc.stderr, run_dir, time.monotonic() - start)
        return cache[name]

    return get
