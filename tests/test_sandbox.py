"""The sandbox keeps the run working and the user's files as they were: what the script writes is where it and the
processes it starts expect it during the run, and afterwards the user's folders are put back, even when the run
was killed."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from conftest import run_script

from diagnose.capture import sandbox

QUICK = ("--warmup", "2", "--steps", "4", "--experiments", "none")


def _contents(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def _text(path: Path) -> str:
    try:
        return path.read_text()
    except FileNotFoundError:  # between the sandbox keeping the original aside and the script writing it
        return ""


def _project(tmp_path: Path, source: str) -> Path:
    work = tmp_path / "project"
    work.mkdir()
    (work / "train.py").write_text(source)
    return work


TRAIN_STEPS = (
    "model = torch.nn.Linear(4, 2)\nopt = torch.optim.SGD(model.parameters(), lr=0.1)\n"
    "for step in range(30):\n"
    "    loss = model(torch.randn(8, 4)).pow(2).mean()\n    opt.zero_grad(); loss.backward(); opt.step()\n")


@pytest.mark.full  # starts processes (a whole run, the CLI, a script): the full tier
def test_a_file_the_script_writes_is_read_by_the_subprocess_it_starts(tmp_path):
    """What inductor does before g++ compiles: write a source file from Python, start a process that reads it."""
    work = _project(tmp_path, (
        "import subprocess, sys, torch\n"
        "open('generated.txt', 'w').write('made by the script')\n"
        "open('settings.txt', 'w').write('the script changed this')\n"
        "for name in ('generated.txt', 'settings.txt'):\n"
        "    out = subprocess.run([sys.executable, '-c', f'print(open({name!r}).read())'], capture_output=True,\n"
        "                         text=True, check=True).stdout\n"
        "    print('subprocess read:', out.strip())\n" + TRAIN_STEPS))
    (work / "settings.txt").write_text("the user's settings")
    before = _contents(work)
    run = run_script(work / "train.py", out=tmp_path / "run", options=QUICK, cwd=work)
    assert run.returncode == 0, run.stderr[-2000:]
    log = (tmp_path / "run" / "script.log").read_text()
    assert "subprocess read: made by the script" in log and "subprocess read: the script changed this" in log
    assert _contents(work) == before  # the user's file back, byte for byte; the script's own file gone
    kept = tmp_path / "run" / "sandbox" / "project"
    assert (kept / "generated.txt").read_text() == "made by the script"
    assert (kept / "settings.txt").read_text() == "the script changed this"
    capture = json.loads((tmp_path / "run" / "capture.json").read_text())
    assert str(work / "settings.txt") in capture["restored_files"]
    assert str(work / "generated.txt") in capture["redirected_writes"]


@pytest.mark.full  # starts processes (a whole run, the CLI, a script): the full tier
def test_a_run_killed_mid_way_still_gets_the_users_files_back(tmp_path):
    work = _project(tmp_path, (
        "import os, signal, torch\n" + TRAIN_STEPS +
        "    if step == 3:  # a warm-up step: the run is not over yet\n"
        "        open('notes.txt', 'w').write('overwritten')\n"
        "        os.remove('data.csv')\n"
        "        open('new.txt', 'w').write('new')\n"
        "        os.kill(os.getpid(), signal.SIGKILL)  # as the out-of-memory killer would\n"))
    (work / "notes.txt").write_text("my notes")
    (work / "data.csv").write_text("a,b\n1,2\n")
    before = _contents(work)
    run_script(work / "train.py", out=tmp_path / "run", options=QUICK, cwd=work)
    assert _contents(work) == before
    assert (tmp_path / "run" / "sandbox" / "project" / "new.txt").read_text() == "new"


@pytest.mark.full  # a whole run, timed by nothing it asserts: the full tier (it runs beside another test)
def test_when_diagnose_itself_is_killed_the_script_stops_and_the_next_run_puts_the_files_back(tmp_path):
    """SIGKILL to diagnose (the out-of-memory killer picking it, a job killed outright) leaves no one to restore:
    its child stops with it, and the next `diagnose run` in the folder restores what that run changed."""
    work = _project(tmp_path, (
        "import time, torch\n"
        "open('notes.txt', 'w').write('overwritten')\n"
        "open('new.txt', 'w').write('new')\n"
        "model = torch.nn.Linear(4, 2)\nopt = torch.optim.SGD(model.parameters(), lr=0.1)\n"
        "for step in range(100000):\n"
        "    loss = model(torch.randn(8, 4)).pow(2).mean()\n    opt.zero_grad(); loss.backward(); opt.step()\n"
        "    time.sleep(0.05)\n"))
    (work / "notes.txt").write_text("my notes")
    before = _contents(work)
    command = [sys.executable, "-m", "diagnose", "run", "--out", "diagnose_runs/killed", "--warmup", "100000",
               *QUICK[2:], "train.py"]
    first = subprocess.Popen(command, cwd=work, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while _text(work / "notes.txt") != "overwritten" and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _text(work / "notes.txt") == "overwritten", "the script did not start"
    children = psutil.Process(first.pid).children()
    first.kill()
    first.wait()
    _, running = psutil.wait_procs(children, timeout=60)  # the child stopped with diagnose (SIGTERM)
    assert not running
    assert (work / "notes.txt").read_text() == "overwritten"  # nobody restored it yet
    quick = tmp_path / "quick.py"  # a script elsewhere that touches none of the project's files
    quick.write_text("import torch\n" + TRAIN_STEPS)
    second = run_script(quick, out=work / "diagnose_runs" / "next", options=QUICK, cwd=work)
    assert second.returncode == 0, second.stderr[-2000:]
    assert "was stopped before it restored your files: put back" in second.stderr
    after = _contents(work)
    assert {k: v for k, v in after.items() if not k.startswith("diagnose_runs")} == before
    assert (work / "diagnose_runs" / "killed" / "sandbox" / "project" / "new.txt").read_text() == "new"
    again = run_script(quick, out=work / "diagnose_runs" / "third", options=QUICK, cwd=work)
    assert "was stopped before" not in again.stderr  # restored once, not again


def test_a_change_made_by_another_process_is_named_and_left_as_it_is(tmp_path):
    """No copy from before it exists (diagnose sees Python's writes only): restoring is not possible, saying so is."""
    work = tmp_path / "project"
    work.mkdir()
    (work / "edited.txt").write_text("before")
    (work / "kept.txt").write_text("kept")
    folder = tmp_path / "run" / "sandbox"
    sandbox.prepare(folder, [work], [tmp_path / "run"])
    (work / "edited.txt").write_text("changed by a compiler")  # not through the patched open(): unseen
    os.utime(work / "edited.txt", ns=(1, 1))
    result = sandbox.restore(folder)
    assert result.unrestored == (str(work / "edited.txt"),)
    assert (work / "edited.txt").read_text() == "changed by a compiler" and (work / "kept.txt").read_text() == "kept"
    assert sandbox.restore(folder) is None  # restored once; the state is gone


def test_what_lands_in_a_folder_the_script_made_goes_aside_and_other_new_files_stay(tmp_path, monkeypatch):
    """Inductor makes its cache folder from Python, g++ (another process) writes into it: both go aside with the
    run. A file the script's Python did not make (the user's editor saving meanwhile) is not the run's to move."""
    work = tmp_path / "project"
    (work / "src").mkdir(parents=True)
    (work / "src" / "model.py").write_text("x = 1")
    folder = tmp_path / "run" / "sandbox"
    files = sandbox.prepare(folder, [work], [tmp_path / "run"])
    monkeypatch.setenv(sandbox.STATE_ENV, str(files.state))
    child = sandbox.WriteSandbox([work], folder, [tmp_path / "run"])
    child.install()
    try:
        os.makedirs(work / "inductor-cache" / "ab")
    finally:
        child.uninstall()
    (work / "inductor-cache" / "ab" / "main.so").write_bytes(b"\x7fELF")  # as g++ would leave it
    (work / "notes.md").write_text("saved by the user's editor during the run")
    result = sandbox.restore(folder)
    assert _contents(work) == {"src/model.py": b"x = 1", "notes.md": b"saved by the user's editor during the run"}
    assert sorted(os.listdir(work)) == ["notes.md", "src"]
    assert result.kept == {str(work / "inductor-cache" / "ab" / "main.so"):
                           str(folder / "project" / "inductor-cache" / "ab" / "main.so")}
    assert result.unrestored == ()


def test_another_diagnose_runs_folder_in_the_project_is_not_the_users_change(tmp_path):
    """Two `diagnose run --out` in one folder at once: each writes in its own run folder meanwhile (issue 40)."""
    from diagnose.model import RunConfig
    from diagnose.record.run_record import RunRecord

    work = tmp_path / "project"
    other = work / "c1"
    (other / "sandbox" / ".state").mkdir(parents=True)
    RunRecord(other).save_config(RunConfig("train.py", (), str(other), 1, 2, 60.0))
    (other / "script.log").write_text("step 1\n")
    (other / "sandbox" / ".state" / "owner.json").write_text("{}")
    (work / "edited.txt").write_text("before")
    folder = tmp_path / "run" / "sandbox"
    sandbox.prepare(folder, [work], [tmp_path / "run"])
    with open(other / "script.log", "a") as log:  # the other run goes on writing
        log.write("step 2\n" * 100)
    (other / "sandbox" / ".state" / "owner.json").write_text('{"pid": 12345}')
    result = sandbox.restore(folder)
    assert result.unrestored == ()


@pytest.mark.full  # starts processes (a whole run, the CLI, a script): the full tier
def test_diagnoses_own_output_redirected_into_the_project_is_not_the_users_change(tmp_path):
    """`diagnose run train.py > run.log 2>&1` in the project folder: run.log grows during the run (issue 40)."""
    from conftest import REPO

    # the script prints more than a buffer's worth: the log grows while the run goes on
    work = _project(tmp_path, "import torch\nprint('training ' * 4000, flush=True)\n" + TRAIN_STEPS)
    with open(work / "run.log", "w") as log:
        proc = subprocess.run([sys.executable, "-m", "diagnose", "run", "--out", str(tmp_path / "run"), *QUICK,
                               "train.py"], cwd=work, stdout=log, stderr=subprocess.STDOUT, timeout=240,
                              env={**os.environ, "PYTHONPATH": str(REPO)})
    output = (work / "run.log").read_text()
    assert proc.returncode == 0, output[-2000:]
    assert "changed during the run" not in output and "run.log" not in output
    capture = json.loads((tmp_path / "run" / "capture.json").read_text())
    assert capture["unrestored_files"] == []


@pytest.mark.full  # starts processes (a whole run, the CLI, a script): the full tier
def test_another_diagnose_runs_redirected_output_is_not_the_users_change(tmp_path):
    """Two runs in one folder, each `> its.log`: the other run's log grows during this one (issue 40). A stand-in
    `diagnose` command writes its log in the project while this run's sandbox lists and restores it."""
    work = tmp_path / "project"
    work.mkdir()
    fake = tmp_path / "bin" / "diagnose"
    fake.parent.mkdir()
    fake.write_text("import sys, time\nfor i in range(200):\n    print('step', i, flush=True)\n    time.sleep(0.05)\n")
    (work / "other.log").write_text("")
    with open(work / "other.log", "w") as log:
        other = subprocess.Popen([sys.executable, str(fake), "run", "train.py"], stdout=log, cwd=work)
    try:
        time.sleep(0.5)
        folder = tmp_path / "run" / "sandbox"
        sandbox.prepare(folder, [work], [tmp_path / "run"])
        time.sleep(0.5)
        result = sandbox.restore(folder)
    finally:
        other.kill()
        other.wait()
    assert result.unrestored == ()
