"""Commands that read a run or traces leave them as they were: `analyze`, `compare` and `report` write only their
own outputs (a new folder, or a run folder's report files), never into what they read. Checked by a checksum of
every file before and after."""
from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO, SAMPLES, TRACES, diagnose_cli

# what `diagnose report RUN` writes into the run folder it re-renders: its outputs, not its inputs
REPORT_OUTPUTS = {"analysis.json", "diagnosis.json", "report.html"}


def checksums(folder: Path, leave_out: frozenset[str] = frozenset()) -> dict[str, str]:
    """sha256 of every file under `folder`, by relative path; `leave_out`: top-level names not counted."""
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file() and p.relative_to(folder).parts[0] not in leave_out}


def test_analyze_and_compare_leave_the_trace_files_they_read_as_they_were(tmp_path):
    traces = tmp_path / "traces"
    traces.mkdir()
    for name in ("cpu_only_with_dataloader.json.gz", "a100_ddp_rank3_of8.json.gz"):
        shutil.copy(TRACES / name, traces / name)
    shutil.copytree(TRACES / "two_ranks", traces / "two_ranks")
    before = checksums(traces)
    one, other = traces / "cpu_only_with_dataloader.json.gz", traces / "a100_ddp_rank3_of8.json.gz"
    for args in (("analyze", str(one), "--out", str(tmp_path / "a1")),
                 ("analyze", str(traces / "two_ranks"), "--out", str(tmp_path / "a2")),
                 ("compare", str(one), str(other), "--force", "--out", str(tmp_path / "c1"))):
        proc = diagnose_cli(*args)
        assert proc.returncode == 0, proc.stderr
    assert checksums(traces) == before


def test_analyze_compare_and_report_leave_a_run_folders_inputs_as_they_were(sample_run, tmp_path):
    run_dir = tmp_path / "run"
    shutil.copytree(sample_run("slow_loader.py").run_dir, run_dir)
    before = checksums(run_dir)
    assert diagnose_cli("analyze", str(run_dir), "--out", str(tmp_path / "a")).returncode == 0
    assert diagnose_cli("compare", str(run_dir), str(run_dir), "--out", str(tmp_path / "c")).returncode == 0
    assert checksums(run_dir) == before  # not a byte written, its analysis and report included
    assert diagnose_cli("report", str(run_dir)).returncode == 0
    assert checksums(run_dir, frozenset(REPORT_OUTPUTS)) == {k: v for k, v in before.items()
                                                             if Path(k).parts[0] not in REPORT_OUTPUTS}


@pytest.mark.full  # starts processes (a whole run, the CLI, a script): the full tier
def test_compare_leaves_ranks_captured_by_the_users_own_launcher_unmerged(tmp_path):
    """Seen before: `diagnose compare` on such a folder wrote RUN/capture.json (the ranks' merge), then refused it.
    The merge is `diagnose report`'s, the command that says the job is over."""
    job = tmp_path / "job"
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "-m", "diagnose", "capture",
               "--out", str(job), "--warmup", "2", "--steps", "4", str(SAMPLES / "healthy.py")]
    launched = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=240)
    assert launched.returncode == 0, launched.stderr[-3000:]
    before = checksums(job)
    refused = diagnose_cli("compare", str(job), str(job), "--out", str(tmp_path / "c"))
    assert refused.returncode == 2 and "holds no analysis.json" in refused.stderr, refused.stderr
    assert checksums(job) == before and not (job / "capture.json").exists()
    assert diagnose_cli("report", str(job)).returncode == 0
    assert (job / "capture.json").exists()  # merged by report
    merged = checksums(job)
    assert diagnose_cli("compare", str(job), str(job), "--out", str(tmp_path / "c2")).returncode == 0
    assert checksums(job) == merged
