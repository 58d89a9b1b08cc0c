"""Start-up, the script's and diagnose's own. The script's is not the measured window: minutes of loading, data
preparation or compilation before the first step still end in a diagnosis, with the start-up shown and attributed;
compiled models run under the capture as they do alone. diagnose's own is bounded by what it imports: `diagnose
analyze` begins reading the trace with the parser alone loaded, the rest imported while a helper parses."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO, SCRIPTS, TRACES, line_of, run_script

SLOW_START = SCRIPTS / "slow_start.py"
COMPILES = SCRIPTS / "compiles.py"


def _startup_attributed_to_the_loader(run, seconds: float) -> None:
    assert run.returncode == 0, run.stderr[-3000:]
    d = run.diagnosis
    assert d["status"] == "completed" and d["steps_profiled"] >= 4, d["status"]
    start = d["startup"]
    assert seconds <= start["seconds"] < seconds + 30 and d["startup_s"] == start["seconds"], start
    assert start["by_activity"]["your code"] >= seconds - 2, start
    assert start["places"]["your code"].endswith(f"slow_start.py:{line_of(SLOW_START, 'time.sleep(seconds)')}")
    assert "Start-up: " in run.stderr and "your code " in run.stderr, run.stderr[-2000:]
    assert "Start-up: " in (run.run_dir / "report.html").read_text()


@pytest.mark.full  # a whole run, timed by nothing it asserts: the full tier (it runs beside another test)
def test_a_start_up_longer_than_max_seconds_still_gets_a_diagnosis(tmp_path):
    """--max-seconds bounds the measured part, from the first step: 12 s of loading do not count against 10."""
    run = run_script(SLOW_START, "12", out=tmp_path / "run",
                     options=("--warmup", "2", "--steps", "4", "--max-seconds", "10", "--experiments", "none"))
    _startup_attributed_to_the_loader(run, 12)


@pytest.mark.full  # a whole run, timed by nothing it asserts: the full tier (it runs beside another test)
def test_ninety_seconds_of_data_preparation_are_diagnosed_with_the_defaults(tmp_path):
    run = run_script(SLOW_START, out=tmp_path / "run", options=("--experiments", "none"), timeout=600)
    _startup_attributed_to_the_loader(run, 90)


def _compiled_run(tmp_path: Path, cache: str):
    """compiles.py alone in a project folder, inductor's cache empty: in a folder of its own, or inside the
    project as some projects set it (./inductor-cache: inductor writes the C++ source from Python, g++ reads it)."""
    work = tmp_path / "project"
    work.mkdir()
    shutil.copy(COMPILES, work / "compiles.py")
    before = sorted(p.name for p in work.iterdir())
    cache_dir = work / "inductor-cache" if cache == "in the project" else tmp_path / "inductor-cache"
    run = run_script(work / "compiles.py", out=tmp_path / "run", cwd=work, timeout=900,
                     options=("--warmup", "3", "--steps", "6", "--experiments", "none"),
                     env={"TORCHINDUCTOR_CACHE_DIR": str(cache_dir)})
    assert run.returncode == 0, run.stderr[-3000:]
    log = (tmp_path / "run" / "script.log").read_text()
    assert "global hooks" not in run.stderr + log, log[-2000:]
    d = run.diagnosis
    assert d["status"] == "completed" and d["steps_profiled"] == 6 and d["step_time_s"]["unprofiled"], d["status"]
    assert d["startup"]["by_activity"].get("compiling", 0) > 1, d["startup"]
    capture = json.loads((tmp_path / "run" / "capture.json").read_text())
    assert capture["model"]["type"] == "Sequential" and capture["model"]["dtype"] == "float32"
    assert sorted(p.name for p in work.iterdir()) == before  # the cache went aside with the run's other files
    return run


@pytest.mark.full  # a whole run, timed by nothing it asserts: the full tier (it runs beside another test)
def test_a_compiled_model_is_diagnosed_without_global_hooks_and_its_compilation_shown(tmp_path):
    _compiled_run(tmp_path, "apart")


@pytest.mark.full  # a whole run, timed by nothing it asserts: the full tier (it runs beside another test)
def test_a_compile_cache_inside_the_project_folder_does_not_break_the_run(tmp_path):
    _compiled_run(tmp_path, "in the project")
    kept = tmp_path / "run" / "sandbox" / "project" / "inductor-cache"
    assert kept.is_dir() and any(kept.rglob("*.py")), "inductor's generated code, kept with the run"


# -- diagnose's own start-up (issue 54) -------------------------------------------------------------------------------
def _python(code: str, *args: str):
    done = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, cwd=REPO, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


FIRST_READ = """
import json, sys
import diagnose.trace.load as load
seen = []
real = load.begin_rows
def first_read(raw, **options):
    seen.extend(sorted(sys.modules))
    return real(raw, **options)
load.begin_rows = first_read
from diagnose.cli import cli
try:
    cli.main(["analyze", sys.argv[1], "--out", sys.argv[2]], standalone_mode=False)
except SystemExit:
    pass
print(json.dumps({"first read": seen, "at the end": sorted(sys.modules)}))
"""
LATER = ("rich", "jinja2", "diagnose.model", "diagnose.analysis", "diagnose.rules", "diagnose.verdict",
         "diagnose.report", "diagnose.commands", "diagnose.api")
# the modules of diagnose loaded when the parsing starts: the CLI, the package, serial.py and the trace reader (24
# when this was written); a module more is a cost every `diagnose analyze` pays before its first read
MOST_OWN_MODULES_BEFORE_THE_READ = 28


def test_analyze_starts_reading_with_the_cli_and_the_trace_reader_loaded_only(tmp_path):
    modules = _python(FIRST_READ, str(TRACES / "cpu_only_with_dataloader.json.gz"), str(tmp_path / "out"))
    loaded = modules["first read"]
    assert loaded, "the trace was not read ahead"
    assert "rich.live" not in modules["at the end"]  # its spinner, on a terminal only: here the output is a pipe
    assert [m for m in loaded if m.split(".")[0] in LATER or m.startswith(LATER)] == []
    own = [m for m in loaded if m.startswith("diagnose")]
    assert len(own) <= MOST_OWN_MODULES_BEFORE_THE_READ, own


def test_help_loads_no_records_numpy_rich_or_jinja():
    code = ("import json, sys\nfrom diagnose.cli import cli\ntry:\n    cli.main(['--help'])\nexcept SystemExit:\n"
            "    pass\nprint(json.dumps([m for m in sys.modules if m.split('.')[0] in ('numpy', 'rich', 'jinja2')"
            " or m in ('diagnose.model', 'diagnose.commands')]))")
    assert _python(code) == []


def test_the_records_are_defined_without_compiling_code():
    """The standard frozen dataclass compiles six methods per class at every import (0.7 ms each class, no bytecode
    cache keeps them); the records (diagnose/lean_dataclass.py) share theirs: importing them compiles no source text
    (modules run their cached bytecode)."""
    code = ("import builtins, json, dataclasses, enum, typing\nruns = []\nreal = builtins.exec\n"
            "def counted(source, *args, **kwargs):\n    runs.extend([1] if isinstance(source, str) else [])\n"
            "    return real(source, *args, **kwargs)\n"
            "builtins.exec = counted\nimport diagnose.model\nbuiltins.exec = real\nprint(json.dumps(len(runs)))")
    assert _python(code) == 0
