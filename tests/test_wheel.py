"""The built wheel (not an editable install) carries rules/ and templates/ and renders a report."""
from __future__ import annotations

import shutil
import subprocess
import sys
import sysconfig
import venv
import zipfile
from pathlib import Path

from conftest import REPO, SAMPLES


def test_wheel_installed_in_a_fresh_venv_renders_a_report(tmp_path):
    dist = tmp_path / "dist"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(dist),
                    str(REPO)], check=True, capture_output=True, text=True)
    [wheel] = dist.glob("diagnose-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert "diagnose/_data/rules/data-loading.slow-loader.toml" in names
    assert "diagnose/_data/templates/report.html.j2" in names

    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=True)
    env_python = env_dir / "bin" / "python"
    site = subprocess.run([str(env_python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          check=True, capture_output=True, text=True).stdout.strip()
    # Dependencies (torch...) come from this interpreter's site-packages, added as a plain path: its .pth files,
    # including an editable install of diagnose, are not processed, so only the wheel provides `diagnose`.
    (Path(site) / "deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    subprocess.run([str(env_python), "-m", "pip", "install", "-q", "--no-deps", "--no-index", str(wheel)],
                   check=True, capture_output=True, text=True)

    work = tmp_path / "work"
    work.mkdir()
    shutil.copy(SAMPLES / "slow_loader.py", work / "train.py")
    where = subprocess.run([str(env_python), "-c", "import diagnose; print(diagnose.__file__)"], cwd=work,
                           check=True, capture_output=True, text=True).stdout
    assert where.startswith(site), where
    proc = subprocess.run([str(env_dir / "bin" / "diagnose"), "run", "--out", "run", "--warmup", "1", "--steps", "3",
                           "--experiments", "none", "train.py"], cwd=work, capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr
    html = (work / "run" / "report.html").read_text()
    assert "Training waits for the DataLoader" in html
