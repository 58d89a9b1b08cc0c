"""The built wheel (not an editable install) carries rules/, templates/ and the samples: installed outside the
repository, `diagnose sample slow_loader && diagnose run slow_loader.py` (the README's main command, on the sample
the wheel bundles) renders a report. The distribution is torch-diagnose; the command and the import stay diagnose."""
from __future__ import annotations

import subprocess
import sys
import sysconfig
import venv
import zipfile
from pathlib import Path

import pytest
from conftest import REPO, diagnose_cli

FAST_RUN = ("--out", "run", "--warmup", "1", "--steps", "3", "--experiments", "none")


def _wheel(tmp_path: Path) -> Path:
    dist = tmp_path / "dist"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(dist),
                    str(REPO)], check=True, capture_output=True, text=True)
    [wheel] = dist.glob("torch_diagnose-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    for bundled in ("diagnose/_data/rules/data-loading.slow-loader.toml", "diagnose/_data/templates/report.html.j2",
                    "diagnose/_data/templates/inline.html.j2", "diagnose/_data/sample_runs/slow_loader.py"):
        assert bundled in names
    return wheel


def _sample_and_run(env_dir: Path, work: Path, *run_options: str, timeout: float = 240) -> str:
    """The README's main command on the bundled sample, in an empty folder: copy it, run it; the report's text."""
    work.mkdir()
    diagnose = str(env_dir / "bin" / "diagnose")
    copied = subprocess.run([diagnose, "sample", "slow_loader"], cwd=work, capture_output=True, text=True, timeout=60)
    assert copied.returncode == 0 and "diagnose run slow_loader.py" in copied.stdout, copied.stderr
    proc = subprocess.run([diagnose, "run", *run_options, "slow_loader.py"], cwd=work, capture_output=True,
                          text=True, timeout=timeout)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return (work / "run" / "report.html").read_text()


@pytest.mark.full  # starts processes (a whole run, the CLI, a script): the full tier
def test_wheel_installed_in_a_fresh_venv_runs_the_bundled_sample(tmp_path):
    wheel = _wheel(tmp_path)
    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=True)
    env_python = env_dir / "bin" / "python"
    site = subprocess.run([str(env_python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          check=True, capture_output=True, text=True).stdout.strip()
    # Dependencies (torch...) come from this interpreter's site-packages, added as a plain path: its .pth files,
    # including an editable install of diagnose, are not processed, so only the wheel provides `diagnose`. (The slow
    # test below installs them from the index instead.)
    (Path(site) / "deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    subprocess.run([str(env_python), "-m", "pip", "install", "-q", "--no-deps", "--no-index", str(wheel)],
                   check=True, capture_output=True, text=True)
    where = subprocess.run([str(env_python), "-c", "import diagnose; print(diagnose.__file__)"], cwd=tmp_path,
                           check=True, capture_output=True, text=True).stdout
    assert where.startswith(site), where
    html = _sample_and_run(env_dir, tmp_path / "work", *FAST_RUN)
    assert "Training waits for the DataLoader" in html


@pytest.mark.full  # a whole run, timed by nothing it asserts: the full tier (it runs beside another test)
def test_pip_install_of_the_wheel_with_its_dependencies_runs_the_readme_command(tmp_path):
    """A real install: the wheel and its dependencies from the index (torch kept the CPU build by constraints.txt),
    then the README's main command with a shorter experiment budget."""
    wheel = _wheel(tmp_path)
    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=True)
    install = subprocess.run([str(env_dir / "bin" / "pip"), "install", "-q", "-c", str(REPO / "constraints.txt"),
                              str(wheel)], capture_output=True, text=True, timeout=900)
    assert install.returncode == 0, install.stderr[-3000:]
    torch_version = subprocess.run([str(env_dir / "bin" / "python"), "-c", "import torch; print(torch.__version__)"],
                                   capture_output=True, text=True, timeout=120).stdout
    assert "+cpu" in torch_version
    html = _sample_and_run(env_dir, tmp_path / "work", "--out", "run", "--budget-seconds", "60", timeout=600)
    assert "Training waits for the DataLoader" in html and "dataloader.num_workers" in html


def test_sample_lists_copies_and_never_overwrites(tmp_path):
    listed = diagnose_cli("sample", cwd=tmp_path)
    assert listed.returncode == 0 and "slow_loader" in listed.stdout and "Data-loading bottleneck" in listed.stdout
    assert diagnose_cli("sample", "slow_loader", cwd=tmp_path).returncode == 0
    (tmp_path / "slow_loader.py").write_text("# mine now\n")
    again = diagnose_cli("sample", "slow_loader", cwd=tmp_path)
    assert again.returncode == 2 and "already exists" in again.stderr
    assert (tmp_path / "slow_loader.py").read_text() == "# mine now\n"
    unknown = diagnose_cli("sample", "fast_loader", cwd=tmp_path)
    assert unknown.returncode == 2 and "no sample named fast_loader" in unknown.stderr
