"""Start-up is not the measured window: minutes of loading, data preparation or compilation before the first
step still end in a diagnosis, with the start-up shown and attributed; compiled models run under the capture as
they do alone."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from conftest import SCRIPTS, line_of, run_script

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


@pytest.mark.slow  # long (a whole run or several): the slow tier
def test_a_start_up_longer_than_max_seconds_still_gets_a_diagnosis(tmp_path):
    """--max-seconds bounds the measured part, from the first step: 12 s of loading do not count against 10."""
    run = run_script(SLOW_START, "12", out=tmp_path / "run",
                     options=("--warmup", "2", "--steps", "4", "--max-seconds", "10", "--experiments", "none"))
    _startup_attributed_to_the_loader(run, 12)


@pytest.mark.slow
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


@pytest.mark.slow
def test_a_compiled_model_is_diagnosed_without_global_hooks_and_its_compilation_shown(tmp_path):
    _compiled_run(tmp_path, "apart")


@pytest.mark.slow
def test_a_compile_cache_inside_the_project_folder_does_not_break_the_run(tmp_path):
    _compiled_run(tmp_path, "in the project")
    kept = tmp_path / "run" / "sandbox" / "project" / "inductor-cache"
    assert kept.is_dir() and any(kept.rglob("*.py")), "inductor's generated code, kept with the run"
