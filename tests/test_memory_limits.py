"""The memory limit that applies, read and named (issue 40): cgroup v2 and v1 trees faked in a temporary folder,
the rlimits through a stand-in getrlimit, NVML through a mock (no GPU here); a real child under an address-space
limit set outside diagnose, as `ulimit -v` or prlimit would."""
from __future__ import annotations

import resource
from pathlib import Path
from types import SimpleNamespace

import pytest
from conftest import assert_matches_schema

from diagnose.capture.limits import (
    cgroup_candidates,
    cuda_limit,
    host_limit,
    oom_kill_count,
    own_cgroup_paths,
    rlimit_candidates,
)
from diagnose.model import LimitCandidate

GIB = 2 ** 30


def _v2_tree(root: Path, path: str, files: dict[str, str], parent_files: dict[str, str] = None) -> Path:
    (root / "cgroup.controllers").write_text("cpu memory\n")
    folder = root / path.lstrip("/")
    folder.mkdir(parents=True)
    for name, text in files.items():
        (folder / name).write_text(text)
    for name, text in (parent_files or {}).items():
        (folder.parent / name).write_text(text)
    return folder


def test_proc_self_cgroup_names_the_v2_path_and_the_v1_memory_path():
    text = "12:cpu,cpuacct:/a\n4:memory:/process_api/x\n0::/user.slice/job\n"
    assert own_cgroup_paths(text) == ("/user.slice/job", "/process_api/x")
    assert own_cgroup_paths("garbage\n") == (None, None)


def test_v2_memory_max_and_high_of_the_cgroup_and_its_parents_are_read(tmp_path):
    _v2_tree(tmp_path, "/slurm/job_7", {"memory.max": "4294967296\n", "memory.high": "max\n"},
             parent_files={"memory.max": "8589934592\n"})
    found = cgroup_candidates(tmp_path, "0::/slurm/job_7\n")
    assert [(c.limit_bytes, c.kind) for c in found] == [(4 * GIB, "cgroup"), (8 * GIB, "cgroup")]
    assert "memory.max" in found[0].source and str(tmp_path / "slurm" / "job_7") in found[0].source


def test_memory_high_counts_too_and_max_means_none(tmp_path):
    _v2_tree(tmp_path, "/a", {"memory.max": "max\n", "memory.high": "3221225472\n"})
    assert [c.limit_bytes for c in cgroup_candidates(tmp_path, "0::/a\n")] == [3 * GIB]


def test_a_container_sees_its_own_cgroup_at_the_root_whatever_proc_says(tmp_path):
    (tmp_path / "cgroup.controllers").write_text("memory\n")
    (tmp_path / "memory.max").write_text("2147483648\n")
    found = cgroup_candidates(tmp_path, "0::/docker/0123abcd\n")  # the host's path: not there in the container
    assert [c.limit_bytes for c in found] == [2 * GIB]


def test_v1_limit_in_bytes_is_read_and_its_no_limit_value_ignored(tmp_path):
    folder = tmp_path / "memory" / "process_api" / "x"
    folder.mkdir(parents=True)
    (folder / "memory.limit_in_bytes").write_text("1073741824\n")
    (folder.parent / "memory.limit_in_bytes").write_text("9223372036854771712\n")
    (tmp_path / "memory" / "memory.limit_in_bytes").write_text("9223372036854771712\n")
    found = cgroup_candidates(tmp_path, "4:memory:/process_api/x\n0::/\n")
    assert [c.limit_bytes for c in found] == [GIB] and "memory.limit_in_bytes" in found[0].source


def test_no_cgroup_filesystem_means_no_cgroup_limit(tmp_path):
    assert cgroup_candidates(tmp_path / "absent", "0::/\n") == []
    assert oom_kill_count(tmp_path / "absent", "0::/\n") is None


def test_the_oom_kill_count_is_read_from_v2_events_and_v1_oom_control(tmp_path):
    _v2_tree(tmp_path, "/a", {"memory.events": "low 0\nhigh 0\nmax 3\noom 2\noom_kill 2\n"})
    assert oom_kill_count(tmp_path, "0::/a\n") == 2
    v1 = tmp_path / "v1" / "memory"
    v1.mkdir(parents=True)
    (v1 / "memory.oom_control").write_text("oom_kill_disable 0\nunder_oom 0\noom_kill 5\n")
    assert oom_kill_count(tmp_path / "v1", "4:memory:/\n") == 5


def test_rlimits_are_read_when_set_and_unlimited_is_none():
    limits = {resource.RLIMIT_AS: (2 * GIB, resource.RLIM_INFINITY),
              resource.RLIMIT_DATA: (resource.RLIM_INFINITY, resource.RLIM_INFINITY)}
    found = rlimit_candidates(lambda which: limits[which])
    assert [(c.source, c.limit_bytes) for c in found] == [("RLIMIT_AS, ulimit -v", 2 * GIB)]


def test_the_smallest_limit_applies_and_an_address_space_limit_counts_from_zero():
    machine = 24 * GIB
    rlimit = [LimitCandidate("RLIMIT_AS, ulimit -v", 2 * GIB, "rlimit")]
    cgroup = [LimitCandidate("cgroup memory.max (x)", 4 * GIB, "cgroup")]
    assert host_limit(None, GIB // 2, machine, rlimit, cgroup).source == "RLIMIT_AS, ulimit -v"
    assert host_limit(None, 0, machine, [], cgroup).limit_bytes == 4 * GIB
    assert host_limit(None, 0, machine, [], []).source == "the machine's memory"
    # --memory-limit 1.8 GiB is growth from the script's start; 2 GiB of address space with 0.5 GiB already used
    # leaves 1.5 GiB: the rlimit is the tighter
    chosen = host_limit(int(1.8 * GIB), GIB // 2, machine, rlimit, cgroup)
    assert chosen.source == "RLIMIT_AS, ulimit -v" and len(chosen.candidates) == 4
    assert host_limit(GIB, GIB // 2, machine, rlimit, cgroup).source == "--memory-limit"


def _nvml(total: int, others: list[tuple[int, int]], mig: bool = False):
    processes = [SimpleNamespace(pid=pid, usedGpuMemory=used) for pid, used in others]
    return SimpleNamespace(
        NVML_DEVICE_MIG_ENABLE=1,
        nvmlDeviceGetHandleByIndex=lambda i: "gpu",
        nvmlDeviceGetMigMode=lambda h: (1 if mig else 0, 1 if mig else 0),
        nvmlDeviceGetMigDeviceHandleByIndex=lambda h, i: "mig",
        nvmlDeviceGetMemoryInfo=lambda h: SimpleNamespace(total=total // 7 if h == "mig" else total),
        nvmlDeviceGetComputeRunningProcesses=lambda h: processes)


def test_on_cuda_what_other_processes_hold_is_taken_off_the_device(monkeypatch):
    """A mock of NVML: this machine has no GPU (benchmarks/gpu_check.sh runs the real one when one is lent)."""
    import os

    nvml = _nvml(80 * GIB, [(os.getpid(), 5 * GIB), (os.getpid() + 1, 30 * GIB)])
    reading = cuda_limit(None, 80 * GIB, nvml=nvml)
    assert reading.limit_bytes == 50 * GIB and "30.0 GiB other processes hold (NVML)" in reading.source
    assert cuda_limit(40 * GIB, 80 * GIB, nvml=nvml).source == "--memory-limit"


def test_a_mig_slice_is_the_limit_not_the_whole_gpu():
    reading = cuda_limit(None, 80 * GIB, nvml=_nvml(70 * GIB, [], mig=True))
    assert reading.limit_bytes == 10 * GIB and reading.source == "the MIG slice's memory"


def test_without_nvml_the_device_total_is_the_limit():
    broken = SimpleNamespace(nvmlDeviceGetHandleByIndex=lambda i: (_ for _ in ()).throw(RuntimeError("no")))
    reading = cuda_limit(None, 80 * GIB, nvml=broken)
    assert reading.limit_bytes == 80 * GIB and reading.source == "the GPU's memory"


def _address_space(limit: int):
    def set_it():  # in the child before exec, as `ulimit -v` or prlimit would: diagnose inherits it
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

    return set_it


@pytest.mark.full  # starts processes (a whole run, the CLI, a script): the full tier
def test_a_ulimit_set_outside_diagnose_is_the_limit_it_names(tmp_path):
    """A real child under RLIMIT_AS, set before diagnose starts: the out-of-memory diagnosis names that limit and
    its value, not the machine's memory."""
    import json
    import subprocess
    import sys

    from conftest import REPO, SCRIPTS

    limit = 2 * GIB
    proc = subprocess.run([sys.executable, "-m", "diagnose", "run", "--out", str(tmp_path / "run"), "--warmup", "2",
                           "--steps", "3", "--experiments", "none", str(SCRIPTS / "activation_heavy.py"),
                           "--batch-size", "16384"], cwd=REPO, capture_output=True, text=True, timeout=240,
                          preexec_fn=_address_space(limit))
    assert proc.returncode == 5, proc.stderr
    diagnosis = json.loads((tmp_path / "run" / "diagnosis.json").read_text())
    oom = diagnosis["out_of_memory"]
    assert oom["limit_bytes"] == limit and oom["limit_source"] == "RLIMIT_AS, ulimit -v"
    assert oom["in_use_bytes"] + oom["requested_bytes"] > 0.9 * limit  # the whole address space counts
    assert diagnosis["memory"]["limit_source"] == "RLIMIT_AS, ulimit -v"
    assert "against 2.0 GiB (RLIMIT_AS, ulimit -v)" in proc.stderr
    capture = json.loads((tmp_path / "run" / "capture.json").read_text())
    assert capture["memory_limit"]["kind"] == "rlimit"
    assert {c["kind"] for c in capture["memory_limit"]["candidates"]} >= {"rlimit", "machine"}
    assert_matches_schema("diagnosis", tmp_path / "run" / "diagnosis.json")  # out of memory under a ulimit


def _fake_cgroup(tmp_path: Path) -> Path:
    """A cgroup v2 folder with a 4 GiB memory.max and no OOM kill yet; the scripts below count one in it before
    they SIGKILL themselves, as the kernel's OOM killer would (no real cgroup is made or limited here)."""
    root = tmp_path / "cgroup"
    root.mkdir()
    (root / "cgroup.controllers").write_text("cpu memory\n")
    (root / "memory.max").write_text(f"{4 * GIB}\n")
    (root / "memory.events").write_text("low 0\nhigh 0\nmax 0\noom 0\noom_kill 0\n")
    return root


KILLED_BY_THE_OOM_KILLER = (
    "import os, signal\n"
    "def oom_kill():\n"
    "    open(os.path.join(os.environ['DIAGNOSE_CGROUP_ROOT'], 'memory.events'), 'w').write('oom 1\\noom_kill 1\\n')\n"
    "    os.kill(os.getpid(), signal.SIGKILL)\n")


def _run_under_fake_cgroup(tmp_path: Path, source: str):
    import json
    import os
    import subprocess
    import sys

    from conftest import REPO

    work = tmp_path / "project"
    work.mkdir()
    (work / "train.py").write_text(KILLED_BY_THE_OOM_KILLER + source)
    env = {**os.environ, "DIAGNOSE_CGROUP_ROOT": str(_fake_cgroup(tmp_path)), "PYTHONPATH": str(REPO)}
    proc = subprocess.run([sys.executable, "-m", "diagnose", "run", "--out", str(tmp_path / "run"), "--warmup", "2",
                           "--steps", "3", "--experiments", "none", "train.py"], cwd=work, capture_output=True,
                          text=True, timeout=240, env=env)
    return proc, json.loads((tmp_path / "run" / "diagnosis.json").read_text())


@pytest.mark.full  # starts processes (a whole run, the CLI, a script): the full tier
def test_a_script_the_oom_killer_takes_is_diagnosed_as_out_of_memory_against_the_cgroup(tmp_path):
    proc, diagnosis = _run_under_fake_cgroup(tmp_path, (
        "import torch\nmodel = torch.nn.Linear(8, 2)\nopt = torch.optim.SGD(model.parameters(), lr=0.1)\n"
        "for step in range(40):\n"
        "    if step == 6:\n        oom_kill()\n"
        "    opt.zero_grad(); model(torch.randn(4, 8)).sum().backward(); opt.step()\n"))
    assert proc.returncode == 5, proc.stderr[-3000:]
    assert diagnosis["status"] == "out_of_memory"
    oom = diagnosis["out_of_memory"]
    assert oom["limit_bytes"] == 4 * GIB and oom["limit_source"].startswith("cgroup memory.max")
    assert "OOM killer" in proc.stderr
    assert_matches_schema("diagnosis", tmp_path / "run" / "diagnosis.json")  # killed by the OOM killer


@pytest.mark.full  # starts processes (a whole run, the CLI, a script): the full tier
def test_a_dataloader_worker_the_oom_killer_takes_is_out_of_memory_too(tmp_path):
    proc, diagnosis = _run_under_fake_cgroup(tmp_path, (
        "import torch\n"
        "class Items(torch.utils.data.Dataset):\n"
        "    def __len__(self):\n        return 4096\n"
        "    def __getitem__(self, i):\n"
        "        if i == 30:\n            oom_kill()\n"
        "        return torch.randn(8)\n"
        "if __name__ == '__main__':\n"
        "    loader = torch.utils.data.DataLoader(Items(), batch_size=4, num_workers=1)\n"
        "    model = torch.nn.Linear(8, 2)\n    opt = torch.optim.SGD(model.parameters(), lr=0.1)\n"
        "    for x in loader:\n"
        "        opt.zero_grad(); model(x).sum().backward(); opt.step()\n"))
    assert proc.returncode == 5, proc.stderr[-3000:]
    oom = diagnosis["out_of_memory"]
    assert diagnosis["status"] == "out_of_memory" and oom["limit_source"].startswith("cgroup memory.max")
    assert oom["limit_bytes"] == 4 * GIB
    assert_matches_schema("diagnosis", tmp_path / "run" / "diagnosis.json")  # a worker the OOM killer took


def test_a_worker_killed_mid_batch_shows_as_the_loaders_error_and_is_out_of_memory_too(tmp_path, monkeypatch):
    """Killed while it handed a batch over, the worker leaves the main process a reset connection inside the
    loader's next() (torch's "killed by signal" may come later, or not at all): the count decides."""
    from diagnose.capture.killed import worker_was_oom_killed

    root = _fake_cgroup(tmp_path)
    monkeypatch.setenv("DIAGNOSE_CGROUP_ROOT", str(root))
    loader_file = str(tmp_path / "site-packages" / "torch" / "utils" / "data" / "dataloader.py")
    try:
        exec(compile("raise ConnectionResetError(104, 'Connection reset by peer')", loader_file, "exec"))
    except ConnectionResetError as exc:
        reset = exc
    assert not worker_was_oom_killed(reset, 0)  # no OOM kill counted: a reset connection is just that
    (root / "memory.events").write_text("oom 1\noom_kill 1\n")
    assert worker_was_oom_killed(reset, 0)
    assert worker_was_oom_killed(RuntimeError("DataLoader worker (pid 7) is killed by signal: Killed. "), 0)
    assert not worker_was_oom_killed(ValueError("bad value"), 0)  # not from a loader
    assert not worker_was_oom_killed(reset, None)  # no count to read
