"""Bad input and interruptions: clear errors, the right exit codes, and partial results kept."""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest
from conftest import REPO, SAMPLES, SCRIPTS, TRACES, diagnose_cli, run_script


@pytest.mark.full  # starts processes (a whole run, the CLI, a script): the full tier
def test_missing_script_is_a_clear_error_without_traceback(tmp_path):
    proc = diagnose_cli("run", "--out", str(tmp_path / "run"), "no_such_train.py")
    assert proc.returncode == 2
    assert "script not found: no_such_train.py" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("args, message", [
    (("--nproc-per-node", "0", str(SAMPLES / "healthy.py")), "--nproc-per-node 0: not a number of processes"),
    (("--nproc-per-node", "x", str(SAMPLES / "healthy.py")), "--nproc-per-node x: not a number of processes"),
    ((str(TRACES / "rocm_mi250_toy.json.gz"),), "it looks like a trace"),
])
@pytest.mark.full  # starts processes (a whole run, the CLI, a script): the full tier
def test_bad_arguments_are_refused_before_anything_runs(tmp_path, args, message):
    proc = diagnose_cli("run", "--out", str(tmp_path / "run"), *args)
    assert proc.returncode == 2 and message in proc.stderr and "Traceback" not in proc.stderr
    assert not (tmp_path / "run").exists()


@pytest.mark.full  # starts processes (a whole run, the CLI, a script): the full tier
def test_syntax_error_names_the_line_without_our_traceback(tmp_path):
    proc = diagnose_cli("run", "--out", str(tmp_path / "run"), str(SCRIPTS / "syntax_error.py"))
    assert proc.returncode == 2
    assert "syntax error" in proc.stderr and "syntax_error.py\", line" in proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.mark.full  # starts processes (a whole run, the CLI, a script): the full tier
def test_existing_out_folder_is_never_overwritten(tmp_path):
    (tmp_path / "keep.txt").write_text("mine")
    proc = diagnose_cli("run", "--out", str(tmp_path), str(SAMPLES / "slow_loader.py"))
    assert proc.returncode == 2 and "already exists" in proc.stderr
    assert (tmp_path / "keep.txt").read_text() == "mine" and len(list(tmp_path.iterdir())) == 1


# 3 warm-up steps and 3 timed ones (as many as are profiled): the profiler starts at step 6, before the error at 7
RAISES_AFTER_PROFILING = ("--warmup", "3", "--steps", "3", "--experiments", "none")


def test_script_raising_at_step_7_exits_nonzero_shows_its_error_and_keeps_results(tmp_path):
    run = run_script(SCRIPTS / "raises_at_step.py", out=tmp_path / "run", options=RAISES_AFTER_PROFILING)
    assert run.returncode == 1
    assert "RuntimeError: boom at step 7" in run.stderr
    assert 'raises_at_step.py", line' in run.stderr and "diagnose/capture" not in run.stderr
    d = run.diagnosis
    assert d["status"] == "script_error" and d["steps_profiled"] >= 1
    assert (run.run_dir / "report.html").is_file()
    assert "boom at step 7" in (run.run_dir / "report.html").read_text()


@pytest.mark.full  # starts processes (a whole run, the CLI, a script): the full tier
def test_sigterm_while_the_scripts_error_is_read_keeps_the_error_and_the_results(tmp_path):
    # A rank under torchrun: its all-reduce fails as a peer dies, and torchrun's SIGTERM lands meanwhile.
    run = run_script(SCRIPTS / "raises_at_step.py", "--sigterm-on-error", out=tmp_path / "run",
                     options=RAISES_AFTER_PROFILING)
    assert run.returncode == 1, run.stderr
    assert "PeerClosedError: boom at step 7" in run.stderr and "StopCapture" not in run.stderr
    d = run.diagnosis
    assert d["status"] == "script_error" and d["steps_profiled"] >= 1
    assert (run.run_dir / "capture.json").is_file() and (run.run_dir / "report.html").is_file()


@pytest.mark.full  # a whole run, timed by nothing it asserts: the full tier (it runs beside another test)
def test_script_that_never_reaches_a_step_stops_at_the_startup_limit_and_says_how_to_mark_steps(tmp_path):
    """Its own code, nothing of training in sight (no model call, DataLoader or optimizer): its steps need marking."""
    run = run_script(SCRIPTS / "no_steps.py", out=tmp_path / "run", options=("--startup-seconds", "6"))
    assert run.returncode == 3
    assert "diagnose.step()" in run.stderr and "in your code at tests/scripts/no_steps.py:" in run.stderr
    assert run.diagnosis["status"] == "no_steps" and run.diagnosis["steps_profiled"] == 0
    assert run.diagnosis["startup"]["stopped_at_limit"]  # stopped by --startup-seconds: the script loops forever


@pytest.mark.full  # starts processes (a whole run, the CLI, a script): the full tier
def test_script_argument_errors_are_the_scripts_own(tmp_path):
    run = run_script(SAMPLES / "args_and_import" / "train.py", out=tmp_path / "run")
    assert run.returncode == 1
    assert "the following arguments are required" in run.stderr


@pytest.mark.full  # starts processes (a whole run, the CLI, a script): the full tier
def test_swallowing_exceptions_does_not_stop_diagnose_from_ending_the_script(tmp_path):
    run = run_script(SCRIPTS / "catches_everything.py", out=tmp_path / "run")
    assert run.returncode == 0, run.stderr
    assert run.diagnosis["steps_profiled"] == 8


def _ctrl_c_as_in_a_terminal():
    """SIGINT handled as in an interactive shell, even when pytest itself was started in the background by a
    non-interactive shell (which ignores SIGINT for it, and an ignored signal stays ignored across exec)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.mark.full  # starts processes (a whole run, the CLI, a script): the full tier
def test_ctrl_c_writes_a_partial_report(tmp_path):
    out = tmp_path / "run"
    proc = subprocess.Popen([sys.executable, "-m", "diagnose", "run", "--out", str(out), "--warmup", "2",
                             "--steps", "500", str(SAMPLES / "slow_loader.py")],
                            cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True, preexec_fn=_ctrl_c_as_in_a_terminal)
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline and not _profiling_started(out):
        time.sleep(0.5)
    time.sleep(1)
    os.killpg(proc.pid, signal.SIGINT)  # what Ctrl-C in a terminal does: the whole foreground group
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 130, stderr
    assert "Traceback" not in stderr
    d = json.loads((out / "diagnosis.json").read_text())
    assert d["status"] == "interrupted" and d["steps_profiled"] >= 1
    assert (out / "report.html").is_file()


@pytest.mark.full  # a whole run, timed by nothing it asserts: the full tier (it runs beside another test)
def test_ctrl_c_during_the_experiments_stops_them_and_keeps_what_was_measured(tmp_path):
    out = tmp_path / "run"
    proc = subprocess.Popen([sys.executable, "-m", "diagnose", "run", "--out", str(out), "--warmup", "2",
                             "--steps", "5", "--budget-seconds", "300", str(SAMPLES / "slow_loader.py")], cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
                            preexec_fn=_ctrl_c_as_in_a_terminal)
    deadline = time.monotonic() + 150
    while time.monotonic() < deadline and len(list((out / "experiments").glob("*/measure.json"))) < 3:
        time.sleep(0.5)
    started = time.monotonic()
    os.killpg(proc.pid, signal.SIGINT)  # Ctrl-C: diagnose and the experiment run in progress
    _, stderr = proc.communicate(timeout=120)
    assert time.monotonic() - started < 30  # it stops, instead of running the rest of the 300 s budget
    assert proc.returncode == 130, stderr
    assert "Traceback" not in stderr and "Experiments interrupted (Ctrl-C)" in stderr
    d = json.loads((out / "diagnosis.json").read_text())
    assert d["experiments_interrupted"] and d["findings"] and d["headline"] is None
    reasons = " ".join(e["reason"] for e in d["experiments"])
    assert "interrupted (Ctrl-C)" in reasons
    assert "Experiments interrupted (Ctrl-C)" in (out / "report.html").read_text()


def _profiling_started(out) -> bool:
    log = out / "script.log"  # the script prints every 20 steps; by step 20 the profiler runs
    return log.exists() and "step 20" in log.read_text()


@pytest.mark.full  # starts processes (a whole run, the CLI, a script): the full tier
def test_files_the_script_writes_never_overwrite_the_users_files(tmp_path):
    work = tmp_path / "project"
    work.mkdir()
    script = work / "train.py"
    shutil.copy(SCRIPTS / "writes_checkpoint.py", script)
    (work / "ckpt.pt").write_bytes(b"my precious checkpoint")
    (work / "train.log").write_text("yesterday's log\n")
    before = {p.name: p.read_bytes() for p in work.iterdir()}
    run = run_script(script, out=tmp_path / "run", cwd=work)
    assert run.returncode == 0, run.stderr
    assert {p.name: p.read_bytes() for p in work.iterdir()} == before
    sandbox = tmp_path / "run" / "sandbox" / "project"
    assert (sandbox / "ckpt.pt").stat().st_size > 100  # the script's own checkpoint, kept aside
    log = (sandbox / "train.log").read_text()
    assert log.startswith("yesterday's log\n") and "step 5" in log  # appended to a copy
    capture = json.loads((tmp_path / "run" / "capture.json").read_text())
    assert str(work / "ckpt.pt") in capture["redirected_writes"]


@pytest.mark.full  # starts processes (a whole run, the CLI, a script): the full tier
def test_scripts_that_remove_temporary_folders_still_work_under_the_sandbox(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(
        "import os, shutil, tempfile, torch\n"
        "for step in range(50):\n"
        "    d = tempfile.mkdtemp(dir=os.getcwd())\n"
        "    open(os.path.join(d, 'x'), 'w').write('x')\n"
        "    shutil.rmtree(d)\n"
        "    w = torch.randn(4, requires_grad=True)\n"
        "    (w * 2).sum().backward()\n")
    run = run_script(script, out=tmp_path / "run", cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run", "train.py"]


@pytest.mark.full  # starts processes (a whole run, the CLI, a script): the full tier
def test_a_fresh_output_folder_idiom_leaves_the_users_folder_and_its_files_in_place(tmp_path):
    # rmtree then makedirs: on Linux rmtree removes by directory descriptor, which must not slip past the sandbox
    work = tmp_path / "project"
    (work / "ckpt").mkdir(parents=True)
    (work / "ckpt" / "model.pt").write_bytes(b"last week's model")
    script = work / "train.py"
    script.write_text(
        "import os, shutil, torch\n"
        "for step in range(40):\n"
        "    shutil.rmtree('ckpt', ignore_errors=True)\n"
        "    os.makedirs('ckpt')\n"
        "    w = torch.randn(4, requires_grad=True)\n"
        "    (w * 2).sum().backward()\n"
        "    torch.save(w, os.path.join('ckpt', 'model.pt'))\n"
        "    os.rmdir('ckpt') if step == 39 else None\n")
    run = run_script(script, out=tmp_path / "run", cwd=work)
    assert run.returncode == 0, run.stderr
    assert (work / "ckpt" / "model.pt").read_bytes() == b"last week's model"
    assert sorted(p.name for p in work.iterdir()) == ["ckpt", "train.py"]
    capture = json.loads((tmp_path / "run" / "capture.json").read_text())
    assert str(work / "ckpt" / "model.pt") in capture["restored_files"]


@pytest.mark.full  # starts processes (a whole run, the CLI, a script): the full tier
def test_paths_that_leave_a_folder_the_script_made_still_cannot_touch_the_users_files(tmp_path):
    work = tmp_path / "project"
    (work / "user").mkdir(parents=True)
    (work / "precious.txt").write_text("keep")
    (work / "user" / "a.txt").write_text("a")
    (work / "data.txt").write_text("b")
    script = work / "train.py"
    script.write_text(
        "import os, shutil, torch\n"
        "os.makedirs('out')\n"
        "os.remove('out/../precious.txt')  # '..' out of a folder of its own\n"
        "os.makedirs('tmpwork')\n"
        "os.symlink(os.path.abspath('user'), 'tmpwork/d')\n"
        "os.remove('tmpwork/d/a.txt')  # through a symlink in a folder of its own\n"
        "os.replace('data.txt', 'renamed.txt')\n"
        "assert open('renamed.txt').read() == 'b'  # the script sees its rename\n"
        "try:\n"
        "    shutil.rmtree('nope')\n"
        "except FileNotFoundError:\n"
        "    print('missing folder: FileNotFoundError as usual')\n"
        "for step in range(30):\n"
        "    w = torch.randn(4, requires_grad=True)\n"
        "    (w * 2).sum().backward()\n")
    run = run_script(script, out=tmp_path / "run", cwd=work)
    assert run.returncode == 0, run.stderr
    assert (work / "precious.txt").read_text() == "keep" and (work / "user" / "a.txt").read_text() == "a"
    assert (work / "data.txt").read_text() == "b" and not (work / "renamed.txt").exists()
    assert "FileNotFoundError as usual" in (tmp_path / "run" / "script.log").read_text()


@pytest.mark.full  # starts processes (a whole run, the CLI, a script): the full tier
def test_a_safetensors_checkpoint_never_overwrites_the_users_file(tmp_path):
    """The Hugging Face Trainer saves with safetensors, which writes from Rust, past open()."""
    pytest.importorskip("safetensors", reason="safetensors is not installed")
    work = tmp_path / "project"
    work.mkdir()
    script = work / "train.py"
    script.write_text(
        "import torch\nfrom safetensors.torch import load_file, save_file\n"
        "model = torch.nn.Linear(4, 2)\nopt = torch.optim.SGD(model.parameters(), lr=0.1)\n"
        "for step in range(30):\n"
        "    loss = model(torch.randn(8, 4)).pow(2).mean()\n    opt.zero_grad(); loss.backward(); opt.step()\n"
        "    if step % 5 == 4:\n"
        "        save_file(model.state_dict(), 'model.safetensors')\n"
        "        load_file('model.safetensors')  # reads back its own checkpoint\n")
    (work / "model.safetensors").write_bytes(b"my precious weights")
    before = {p.name: p.read_bytes() for p in work.iterdir()}
    run = run_script(script, out=tmp_path / "run", options=("--warmup", "2", "--steps", "4", "--experiments", "none"),
                     cwd=work)
    assert run.returncode == 0, run.stderr
    assert {p.name: p.read_bytes() for p in work.iterdir()} == before
    assert (tmp_path / "run" / "sandbox" / "project" / "model.safetensors").stat().st_size > 50


@pytest.mark.full  # starts processes (a whole run, the CLI, a script): the full tier
def test_an_atomic_save_that_moves_then_chmods_its_file_works_in_the_sandbox(tmp_path):
    """fsspec's (so Lightning's) checkpoint save: write a temporary file, move it over the target, chmod the target."""
    work = tmp_path / "project"
    work.mkdir()
    script = work / "train.py"
    script.write_text(
        "import os, shutil, tempfile, torch\n"
        "model = torch.nn.Linear(4, 2)\nopt = torch.optim.SGD(model.parameters(), lr=0.1)\n"
        "for step in range(30):\n"
        "    loss = model(torch.randn(8, 4)).pow(2).mean()\n    opt.zero_grad(); loss.backward(); opt.step()\n"
        "    if step % 5 == 4:\n"
        "        fd, tmp = tempfile.mkstemp()\n        os.close(fd)\n"  # in the system's temp folder, as fsspec does
        "        torch.save(model.state_dict(), tmp)\n"
        "        shutil.move(tmp, 'last.ckpt')\n        os.chmod('last.ckpt', 0o644)\n")
    before = {p.name: p.read_bytes() for p in work.iterdir()}
    run = run_script(script, out=tmp_path / "run", options=("--warmup", "2", "--steps", "4", "--experiments", "none"),
                     cwd=work)
    assert run.returncode == 0, run.stderr[-2000:]  # chmod of the moved file found it (in the sandbox)
    assert {p.name: p.read_bytes() for p in work.iterdir()} == before
    assert (tmp_path / "run" / "sandbox" / "project" / "last.ckpt").stat().st_size > 100
