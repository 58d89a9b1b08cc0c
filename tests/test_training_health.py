"""Faults as diagnoses (a NaN loss, a hang, a dead DataLoader worker): real `diagnose run` processes."""
from __future__ import annotations

import json
import re

import pytest
from conftest import SCRIPTS, assert_matches_schema, run_script

FAST = ("--warmup", "3", "--steps", "6", "--experiments", "none")


@pytest.mark.full  # starts processes (a whole run, the CLI, a script): the full tier
def test_a_loss_that_goes_nan_is_the_first_finding_and_the_speed_findings_say_so(tmp_path):
    run = run_script(SCRIPTS / "diverges.py", out=tmp_path / "run", options=FAST)
    assert run.returncode == 0, run.stderr
    d = run.diagnosis
    first = d["findings"][0]
    assert first["rule"] == "training.nonfinite-loss" and first["severity"] == "high"
    assert d["metrics"]["loss_last_finite"] is None or d["metrics"]["loss_last_finite"] > 0
    assert first["predicted_speedup"] is None  # not a speed finding
    step = d["metrics"]["loss_nonfinite_step"]
    assert d["metrics"]["loss_nonfinite"] == 1 and 0 <= step < 5  # SGD at lr 10 overflows within a few steps
    assert f"not finite from step {int(step)} on" in first["message"]
    assert all(f["message"].startswith("(The run was not training") for f in d["findings"][1:])
    assert "Not training: The loss passed to backward() was not finite" in " ".join(run.stderr.split())
    capture = json.loads((run.run_dir / "capture.json").read_text())
    assert capture["loss"]["first_nonfinite_step"] == step and capture["loss"]["checked"] >= 3 + 6 + 6
    assert "set_detect_anomaly" in (run.run_dir / "report.html").read_text()


@pytest.mark.full  # starts processes (a whole run, the CLI, a script): the full tier
def test_a_run_that_trains_has_finite_losses_and_no_such_finding(tmp_path):
    run = run_script(SCRIPTS / "diverges.py", "--lr", "1e-5", out=tmp_path / "run", options=FAST)
    assert run.returncode == 0, run.stderr
    d = run.diagnosis
    assert d["metrics"]["loss_nonfinite"] == 0 and d["metrics"]["loss_nonfinite_step"] is None
    assert not [f for f in d["findings"] if f["category"] == "training"]
    assert "Not training" not in run.stderr


@pytest.mark.full  # starts processes (a whole run, the CLI, a script): the full tier
def test_a_step_that_never_ends_is_diagnosed_as_hung_where_it_waits(tmp_path):
    run = run_script(SCRIPTS / "deadlocks.py", out=tmp_path / "run",
                     options=("--experiments", "none", "--max-seconds", "8"))
    assert run.returncode == 6, run.stderr
    capture = json.loads((run.run_dir / "capture.json").read_text())
    hang = capture["hang"]
    assert capture["status"] == "hung" and run.diagnosis["status"] == "hung"
    assert hang["location"].endswith("deadlocks.py:11") and hang["function"] == "wait_for_the_others"
    assert hang["waiting_on"].startswith("a lock") and hang["open_s"] >= 5
    assert hang["stack"][-1].split(" in ")[0].endswith("deadlocks.py:11")
    said = " ".join(run.stderr.split())
    assert f"Hung: after {capture['steps_seen']} steps" in said and "waiting on a lock" in said
    assert "--max-seconds" not in said  # no longer limit can help a step that waits for ever
    assert "deadlocks.py:26 in <module>: wait_for_the_others(lock)" in run.stderr  # its stack, printed
    assert run.diagnosis["hang"] == hang
    assert_matches_schema("diagnosis", run.run_dir / "diagnosis.json")  # a hung run's diagnosis


@pytest.mark.full  # a whole run, timed by nothing it asserts: the full tier (it runs beside another test)
def test_a_killed_dataloader_worker_ends_the_run_with_its_error_and_the_steps_it_ran(tmp_path):
    # torch's SIGCHLD handler raises 'worker is killed' in the main thread wherever it is: once inside diagnose's
    # own handling of the script's error, it lost the capture ("the script did not start under the profiler")
    for attempt in range(3):
        run = run_script(SCRIPTS / "worker_killed.py", out=tmp_path / f"run{attempt}",
                         options=("--experiments", "none"))
        assert run.returncode == 1, run.stderr
        capture = json.loads((run.run_dir / "capture.json").read_text())
        assert capture["status"] == "script_error" and capture["steps_seen"] >= 20
        # torch says so, or, the worker killed mid-batch, the reset connection its batch was coming through
        message = capture["error"]["message"]
        assert any(said in message for said in ("is killed by signal: Killed", "Connection reset by peer",
                                                    "exited unexpectedly")), message
        assert "did not start under the profiler" not in run.stderr


@pytest.mark.full  # starts processes (a whole run, the CLI, a script): the full tier
def test_a_worker_killed_or_dying_of_a_bus_error_is_named_with_its_cause_and_fix(tmp_path):
    killed = run_script(SCRIPTS / "worker_killed.py", out=tmp_path / "killed", options=("--experiments", "none"))
    assert killed.returncode == 1, killed.stderr
    capture = json.loads((killed.run_dir / "capture.json").read_text())
    assert capture["status"] == "script_error" and capture["steps_seen"] >= 20
    assert "did not start under the profiler" not in killed.stderr
    failure = capture["worker_failure"]
    # the machine had memory to spare: a cgroup's limit or a kill from outside, not the machine's OOM killer
    assert failure["signal"] == "Killed" and failure["cause"] in ("killed", "memory")
    assert failure["workers"] == 2 and failure["batch_bytes"] == 16 * (16 + 1) * 4
    assert failure["in_flight_bytes"] == failure["batch_bytes"] * 2 * 2
    # what the worker held just before, from the samples (it grew by 256 MiB), not after the kill gave it back
    assert failure["worker_rss_bytes"] >= 256 * 2 ** 20 and failure["seconds_before"] < 2.0
    assert failure["workers_rss_bytes"] >= failure["worker_rss_bytes"]
    said = " ".join(killed.stderr.split())
    assert "A DataLoader worker died (Killed). Likely cause: killed with SIGKILL" in said
    assert re.search(r"the worker held \d+\.\d MiB \(\d+\.\d MiB all 2 workers\) \d\.\d s before", said), said
    assert_matches_schema("diagnosis", killed.run_dir / "diagnosis.json")  # a dead worker's diagnosis
    bus = run_script(SCRIPTS / "worker_signal.py", out=tmp_path / "bus", options=("--experiments", "none"))
    assert bus.returncode == 1, bus.stderr
    failure = json.loads((bus.run_dir / "capture.json").read_text())["worker_failure"]
    assert failure["signal"] == "Bus error" and failure["cause"] == "shared-memory"
    assert failure["shm_bytes"] > 0 and "--shm-size" in failure["fix"]
    assert "A DataLoader worker died (Bus error). Likely cause: a /dev/shm too small" in " ".join(bus.stderr.split())
    assert_matches_schema("diagnosis", bus.run_dir / "diagnosis.json")
    segv = run_script(SCRIPTS / "worker_signal.py", "--signal", "SEGV", out=tmp_path / "segv",
                      options=("--experiments", "none"))
    failure = json.loads((segv.run_dir / "capture.json").read_text())["worker_failure"]
    assert failure["signal"] == "Segmentation fault" and failure["cause"] == "native-crash"
    assert "num_workers=0" in failure["fix"] and "faulthandler" in failure["fix"]


@pytest.mark.full  # starts processes (a whole run, the CLI, a script): the full tier
def test_a_step_that_waits_in_native_code_is_ended_and_diagnosed_where_it_waits(tmp_path):
    # a C++ wait never returns to Python for the deadline's handler (a collective, a device sync): a watchdog
    # thread reads where the main thread is, writes the results and ends the process
    run = run_script(SCRIPTS / "waits_in_native_code.py", out=tmp_path / "run",
                     options=("--experiments", "none", "--max-seconds", "6"))
    assert run.returncode == 6, run.stderr
    hang = json.loads((run.run_dir / "capture.json").read_text())["hang"]
    assert hang["native_wait"] and hang["location"].endswith("waits_in_native_code.py:10")
    assert hang["function"] == "wait_for_the_result" and "in native code" in hang["waiting_on"]
    said = " ".join(run.stderr.split())
    assert "waits_in_native_code.py:23 in <module>: wait_for_the_result(torch.futures.Future())" in run.stderr
    assert "The hang came before any step was profiled" in said
    assert run.diagnosis["status"] == "hung"
    assert_matches_schema("diagnosis", run.run_dir / "diagnosis.json")  # hung before any profiled step


@pytest.mark.full  # starts processes (a whole run, the CLI, a script): the full tier
def test_a_dataloader_worker_that_never_returns_its_item_is_named_with_its_line(tmp_path):
    # the workers are processes: each dumps its own stack (faulthandler) when the step has hung
    run = run_script(SCRIPTS / "worker_hangs.py", out=tmp_path / "run",
                     options=("--experiments", "none", "--max-seconds", "8"))
    assert run.returncode == 6, run.stderr
    hang = json.loads((run.run_dir / "capture.json").read_text())["hang"]
    assert hang["waiting_on"] == "a DataLoader worker's batch"
    stuck = [w for w in hang["workers"] if "worker_hangs.py:20 in __getitem__: NEVER.acquire()" in w]
    assert len(stuck) == 1 and stuck[0].endswith("waiting on a lock (threading.Lock.acquire or `with lock:`)")
    assert len(hang["workers"]) == 2 and any(w.endswith("idle: waiting for the next index from the main process")
                                             for w in hang["workers"])
    said = " ".join(run.stderr.split())
    assert "DataLoader worker" in said and "worker_hangs.py:20 in __getitem__" in said
    assert_matches_schema("diagnosis", run.run_dir / "diagnosis.json")  # a hang with the workers' stacks


@pytest.mark.full  # a whole run, timed by nothing it asserts: the full tier (it runs beside another test)
def test_under_torchrun_a_hang_names_every_ranks_place_and_the_rank_not_in_the_collective(tmp_path):
    run = run_script(SCRIPTS / "rank_stuck.py", out=tmp_path / "run",
                     options=("--experiments", "none", "--max-seconds", "8", "--nproc-per-node", "2"), timeout=240)
    assert run.returncode == 6, run.stderr
    hang = json.loads((run.run_dir / "capture.json").read_text())["hang"]
    assert hang["location"].endswith("rank_stuck.py:33") and hang["waiting_on"].startswith("a collective")
    assert hang["ranks"] == ["rank 1: at " + hang["location"].replace(":33", ":16")
                             + " in read_next_shard (time.sleep(3600)), waiting on a sleep"]
    said = " ".join(run.stderr.split())
    assert "Not in the collective: rank 1: at" in said and "rank_stuck.py:16 in read_next_shard" in said
