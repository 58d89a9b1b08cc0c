"""benchmarks/gpu_check.sh, the prepared GPU check: its plumbing on the CPU (GPU_CHECK_DEVICE=cpu, small sizes),
and its clear refusals where it cannot run."""
from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest
from conftest import REPO

SCRIPT = REPO / "benchmarks" / "gpu_check.sh"


def _gpu_check(tmp_path, **env) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(SCRIPT)], cwd=tmp_path, capture_output=True, text=True, timeout=280,
                          env={**os.environ, "PYTHON": sys.executable, "OUT": str(tmp_path / "out"), **env})


@pytest.mark.full  # a whole run, timed by nothing it asserts: the full tier (it runs beside another test)
def test_gpu_check_runs_each_sample_under_diagnose_and_plainly_and_prints_both_step_times(tmp_path):
    # a shared CPU is too noisy for the 15% bound the check holds a GPU to: here it checks the plumbing
    proc = _gpu_check(tmp_path, GPU_CHECK_DEVICE="cpu", GPU_CHECK_TOLERANCE="10")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = {line.split()[0]: line for line in proc.stdout.splitlines()[1:] if line.startswith(("gpu_bound", "cuda"))}
    assert sorted(rows) == ["cuda_train_cpu", "gpu_bound_small"], proc.stdout
    for row in rows.values():
        figures = re.findall(r"(\d+\.\d) ms", row)
        assert len(figures) == 3 and row.rstrip().endswith("ok"), row  # diagnose, profiled, plain; then the ratio
    assert list((tmp_path / "out").glob("gpu_check.*/gpu_bound_small/diagnosis.json"))


@pytest.mark.full  # starts processes (a whole run, the CLI, a script): the full tier
def test_gpu_check_without_a_gpu_says_so(tmp_path):
    proc = _gpu_check(tmp_path)
    assert proc.returncode == 2 and "torch.cuda.is_available() is False" in proc.stderr
    assert "GPU_CHECK_DEVICE=cpu" in proc.stderr


@pytest.mark.full  # starts processes (a whole run, the CLI, a script): the full tier
def test_gpu_check_names_the_modules_it_misses_instead_of_installing_them(tmp_path):
    import venv

    venv.create(tmp_path / "bare", with_pip=False)  # the standard library only
    python = str(tmp_path / "bare" / "bin" / "python")
    proc = _gpu_check(tmp_path, PYTHON=python, PYTHONNOUSERSITE="1", PYTHONPATH="")
    assert proc.returncode == 2, proc.stderr
    assert f"missing for {python}: torch numpy jinja2 click psutil orjson rich" in proc.stderr
