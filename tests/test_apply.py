"""The change a run measured, handed back: RUN/changes/NAME.patch and RUN/verified.patch against the user's files
as they were when the run started, and `diagnose apply` writing it.

Quick tests build a run folder in process (a capture of a held-out script, the experiments' records) and check the
patch text, `git apply --check`, `diagnose apply` (refusing a file edited since, the dry run, backups, a change
not verified faster) and the framework settings written as keyword edits of the user's call. The slow test is a
whole run: `diagnose run` on a held-out slow-loader script, the patch applied to its copy, the patched script run
plainly, faster by the ratio the run claimed."""
from __future__ import annotations

import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import REPO, SCRIPTS, diagnose_cli, line_of, logged_step_times

from diagnose.capture.sources import snapshot
from diagnose.commands.apply import parse_patch, patched
from diagnose.experiments.patches import write_hand_backs
from diagnose.model import (
    Capture,
    Change,
    Environment,
    Experiment,
    ExperimentResults,
    FrameworkSite,
    HandBacks,
    Headline,
    LoaderInfo,
    OptimizerInfo,
    RunConfig,
)
from diagnose.optimizations.base import Context
from diagnose.serial import read_json, write_json

GIT = shutil.which("git")
ENVIRONMENT = Environment(python="3.11", torch="2.13.0", platform="linux", cpu_count=2, total_memory_bytes=8 << 30,
                          cuda_available=False)


def _experiment(optimization: str, setting: dict, verdict: str, speedup: float | None,
                changes: tuple[Change, ...] | None = None) -> Experiment:
    return Experiment(optimization=optimization, setting=setting, metric="steps/s", speedup=speedup,
                      ci=(speedup * 0.9, speedup * 1.1) if speedup else None, verdict=verdict, loss_drift=0.0,
                      peak_memory_bytes=None, reason="", changes=changes if changes is not None
                      else (Change(optimization, setting),))


def _at(script: Path, text: str) -> str | None:
    return f"{script}:{line_of(script, text)}" if text in script.read_text() else None


def _capture(script: Path, framework: FrameworkSite | None = None) -> Capture:
    """Under a framework the loader and optimizer are built in its code: their lines are the configuring call's."""
    loader = LoaderInfo(location=_at(script, "DataLoader(Records"), batch_size=16, num_workers=0,
                        pin_memory=False, persistent_workers=False, prefetch_factor=None, dataset_type="Records",
                        dataset_len=1920)
    optimizer = OptimizerInfo(location=_at(script, "torch.optim.Adam("), type="Adam", lr=1e-3,
                              foreach=None, fused=None)
    return Capture(status="completed", script=str(script), script_args=(), step_source="dataloader", steps_seen=20,
                   steps_profiled=10, warmup_steps=5, wall_s=3.0, environment=ENVIRONMENT, loaders=(loader,),
                   train_loader=0, optimizers=(optimizer,), framework=framework)


def _run_folder(tmp_path: Path, experiments: list[Experiment], headline: Headline | None,
                script_source: Path = SCRIPTS / "slow_reader.py", framework=None) -> tuple[Path, Path]:
    """A project folder holding a copy of the script, and a run folder of it with these experiments' changes
    handed back (the sources hashed as `diagnose run` hashes them at its start)."""
    project, run_dir = tmp_path / "project", tmp_path / "run"
    project.mkdir()
    run_dir.mkdir()
    script = project / "train.py"
    shutil.copyfile(script_source, script)
    sources = snapshot(str(script), project)
    write_json(run_dir / "sources.json", sources)
    write_json(run_dir / "config.json", RunConfig(script=str(script), script_args=(), out_dir=str(run_dir),
                                                  warmup_steps=5, profile_steps=10, max_seconds=60))
    site = framework(script) if framework else None
    results = ExperimentResults(tuple(experiments), headline)
    results = write_hand_backs(run_dir, results, Context(_capture(script, site), None), sources)
    write_json(run_dir / "experiments.json", results)
    return project, run_dir


WORKERS = Change("dataloader.num_workers", {"num_workers": 4})
PERSISTENT = Change("dataloader.persistent_workers", {"persistent_workers": True})


def _verified_run(tmp_path: Path) -> tuple[Path, Path]:
    experiments = [
        _experiment("dataloader.num_workers", {"num_workers": 4}, "faster", 3.9),
        _experiment("dataloader.num_workers", {"num_workers": 2}, "faster", 1.9),
        _experiment("optimizer.fused", {"foreach": True}, "no-change", 1.01),
        _experiment("combined", {"changes": ["dataloader.num_workers(num_workers=4)",
                                             "dataloader.persistent_workers(persistent_workers=True)"]},
                    "faster", 4.2, (WORKERS, PERSISTENT)),
    ]
    headline = Headline(changes=("dataloader.num_workers(num_workers=4)",
                                 "dataloader.persistent_workers(persistent_workers=True)"),
                        speedup=4.2, ci=(3.9, 4.5), verdict="faster", metric="steps/s")
    return _run_folder(tmp_path, experiments, headline)


def _apply(run_dir: Path, *options: str, cwd: Path = REPO) -> subprocess.CompletedProcess:
    return diagnose_cli("apply", str(run_dir), *options, cwd=cwd, timeout=120)


@pytest.mark.full  # starts processes (a whole run, the CLI, a script): the full tier
def test_the_verified_change_is_one_patch_of_the_dataloader_line_that_git_apply_takes(tmp_path):
    project, run_dir = _verified_run(tmp_path)
    patch = (run_dir / "verified.patch").read_text()
    assert patch.startswith("--- a/train.py\n+++ b/train.py\n@@ "), patch
    removed = [line for line in patch.splitlines() if line.startswith("-") and not line.startswith("---")]
    added = [line for line in patch.splitlines() if line.startswith("+") and not line.startswith("+++")]
    assert len(removed) == 1 and "DataLoader(Records(1920), batch_size=16, shuffle=True)" in removed[0], patch
    assert added == ["+    records = DataLoader(Records(1920), batch_size=16, shuffle=True, num_workers=4, "
                     "persistent_workers=True)"], patch
    index = read_json(run_dir / "changes" / "changes.json", HandBacks)
    assert index.folder == str(project)
    names = {h.name: h for h in index.changes}
    # each measured setting has its patch; the best of a sweep is the bare id; the combination is verified.patch
    assert set(names) == {"verified", "dataloader.num_workers", "dataloader.num_workers-2", "optimizer.fused"}
    assert names["dataloader.num_workers"].speedup == 3.9 and names["verified"].patch == "verified.patch"
    assert "foreach=True" in (run_dir / "changes" / "optimizer.fused.patch").read_text()
    assert (run_dir / "verified.md").read_text().startswith("# combined: dataloader.num_workers(num_workers=4)")
    experiments = read_json(run_dir / "experiments.json", ExperimentResults)
    assert experiments.headline.patch == "verified.patch"
    assert {e.patch for e in experiments.experiments if e.optimization == "dataloader.num_workers"} == {
        "changes/dataloader.num_workers.patch", "changes/dataloader.num_workers-2.patch"}
    if GIT:
        check = subprocess.run([GIT, "apply", "--check", str(run_dir / "verified.patch")], cwd=project,
                               capture_output=True, text=True)
        assert check.returncode == 0, check.stderr
    if shutil.which("patch"):
        dry = subprocess.run(["patch", "-p1", "--dry-run", "-i", str(run_dir / "verified.patch")], cwd=project,
                             capture_output=True, text=True)
        assert dry.returncode == 0, dry.stdout + dry.stderr


def test_the_patch_reader_undoes_what_the_writer_wrote_even_without_a_final_newline():
    from diagnose.experiments.patches import unified_diff

    before = "a = 1\nb = 2\nc = 3"
    after = "a = 1\nb = 20\nc = 3"
    text = unified_diff("x.py", before, after)
    assert "\\ No newline at end of file" in text
    [file_patch] = parse_patch(text)
    assert file_patch.path == "x.py" and patched(before, file_patch) == after


@pytest.mark.full  # starts processes (a whole run, the CLI, a script): the full tier
def test_apply_writes_the_verified_change_keeps_a_backup_and_says_what_it_changed(tmp_path):
    project, run_dir = _verified_run(tmp_path)
    script = project / "train.py"
    original = script.read_text()
    (project / "train.py.orig").write_text("someone's own backup\n")
    done = _apply(run_dir)
    assert done.returncode == 0, done.stderr
    assert "persistent_workers=True)" in script.read_text() and "num_workers=4" in script.read_text()
    assert (project / "train.py.orig").read_text() == "someone's own backup\n"  # never overwritten
    assert (project / "train.py.orig.1").read_text() == original
    assert re.search(r"edited train.py: line \d+: `records = DataLoader\(.*num_workers=4", done.stderr), done.stderr
    assert "backup train.py.orig.1" in done.stderr and "Traceback" not in done.stderr
    again = _apply(run_dir)  # already there: nothing written, no second backup
    assert again.returncode == 0 and "already in your files" in again.stderr, again.stderr
    assert not (project / "train.py.orig.2").exists()


def test_apply_refuses_a_file_edited_since_the_run_and_writes_nothing(tmp_path):
    _, run_dir = _verified_run(tmp_path)
    script = tmp_path / "project" / "train.py"
    script.write_text(script.read_text().replace("lr=1e-3", "lr=2e-3"))
    edited = script.read_text()
    refused = _apply(run_dir)
    assert refused.returncode == 7, refused.stderr
    assert "train.py changed since the run" in refused.stderr and "nothing was written" in refused.stderr
    assert "Traceback" not in refused.stderr
    assert script.read_text() == edited and not list(script.parent.glob("*.orig*"))


def test_dry_run_prints_the_diff_and_writes_nothing(tmp_path):
    project, run_dir = _verified_run(tmp_path)
    before = (project / "train.py").read_text()
    dry = _apply(run_dir, "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert dry.stdout == (run_dir / "verified.patch").read_text()
    assert "nothing written" in dry.stderr
    assert (project / "train.py").read_text() == before and not list(project.glob("*.orig*"))


@pytest.mark.skipif(GIT is None, reason="needs git")
@pytest.mark.full  # starts processes (a whole run, the CLI, a script): the full tier
def test_a_clean_git_checkout_is_edited_without_a_backup(tmp_path):
    project, run_dir = _verified_run(tmp_path)
    git = [GIT, "-c", "user.name=t", "-c", "user.email=t@example.com"]
    for args in (["init", "-q"], ["add", "train.py"], ["commit", "-qm", "start"]):
        subprocess.run(git + args, cwd=project, check=True, capture_output=True)
    done = _apply(run_dir)
    assert done.returncode == 0, done.stderr
    assert "git checkout -- train.py" in done.stderr and not list(project.glob("*.orig*"))
    diff = subprocess.run([GIT, "diff"], cwd=project, capture_output=True, text=True).stdout
    assert "num_workers=4, persistent_workers=True" in diff


@pytest.mark.full  # starts processes (a whole run, the CLI, a script): the full tier
def test_a_change_not_verified_faster_is_applied_only_when_named(tmp_path):
    experiments = [_experiment("optimizer.fused", {"foreach": True}, "no-change", 1.01),
                   _experiment("dataloader.num_workers", {"num_workers": 2}, "slower", 0.8)]
    project, run_dir = _run_folder(tmp_path, experiments, None)
    assert not (run_dir / "verified.patch").exists()
    refused = _apply(run_dir)
    assert refused.returncode == 2 and "verified no change faster" in refused.stderr, refused.stderr
    assert "--change" in refused.stderr and "optimizer.fused" in refused.stderr
    assert "foreach" not in (project / "train.py").read_text()
    named = _apply(run_dir, "--change", "optimizer.fused")
    assert named.returncode == 0, named.stderr
    assert "not verified faster" in named.stderr and "applied because it was named" in named.stderr
    assert "torch.optim.Adam(model.parameters(), lr=1e-3, foreach=True)" in (project / "train.py").read_text()
    unknown = _apply(run_dir, "--change", "amp")
    assert unknown.returncode == 2 and "no change named amp" in unknown.stderr


@pytest.mark.full  # starts processes (a whole run, the CLI, a script): the full tier
def test_changes_that_are_not_argument_edits_are_said_as_code_a_statement_or_a_command_line(tmp_path):
    experiments = [_experiment("amp", {"device": "cpu", "dtype": "bfloat16"}, "faster", 1.3),
                   _experiment("tf32", {}, "faster", 1.2),
                   _experiment("expandable_segments", {}, "no-change", 1.0)]
    project, run_dir = _run_folder(tmp_path, experiments, None)
    changes = run_dir / "changes"
    assert not (changes / "amp.patch").exists()  # the training loop's own code: no edit diagnose can write
    amp_note = (changes / "amp.md").read_text()
    assert "no edit diagnose can write" in amp_note and "torch.autocast(" in amp_note
    tf32 = (changes / "tf32.patch").read_text()  # a backend flag: the statement after `import torch`
    assert "\n import torch\n+torch.backends.cuda.matmul.allow_tf32 = True\n" in tf32, tf32
    assert "after `import torch`" in (changes / "tf32.md").read_text()
    if GIT:
        assert subprocess.run([GIT, "apply", "--check", str(changes / "tf32.patch")], cwd=project).returncode == 0
    segments = (changes / "expandable_segments.md").read_text()
    assert "environment variable" in segments and "`PYTORCH_CUDA_ALLOC_CONF=" in segments
    assert "python train.py`" in segments
    said = _apply(run_dir, "--change", "amp")
    assert said.returncode == 0 and "nothing written" in said.stderr, said.stderr


def _framework_site(name: str, call: str):
    """The capture's record of a framework configured at the line of `call` in the script."""
    return lambda script: FrameworkSite(name, f"{script}:{line_of(script, call)}")


def test_hf_trainer_settings_come_back_as_keywords_of_the_training_arguments_call(tmp_path):
    site = _framework_site("huggingface", "TrainingArguments(")
    experiments = [_experiment("dataloader.num_workers", {"num_workers": 4}, "faster", 2.0),
                   _experiment("reduce_host_work", {"every": 50}, "faster", 1.5)]
    _, run_dir = _run_folder(tmp_path, experiments, None, SCRIPTS / "hf_trainer.py", site)
    workers = (run_dir / "changes" / "dataloader.num_workers.patch").read_text()
    logging = (run_dir / "changes" / "reduce_host_work.patch").read_text()
    assert re.search(r'^\+ +num_train_epochs=1, .*save_strategy="no", dataloader_num_workers=4\)$', workers,
                     re.M), workers
    assert "DataLoader(" not in workers
    assert "+args = TrainingArguments(output_dir=\"hf_out\", per_device_train_batch_size=2, logging_steps=50," in (
        logging) and "-args = TrainingArguments(" in logging, logging
    note = (run_dir / "changes" / "reduce_host_work.md").read_text()
    assert "the Hugging Face Trainer's setting on your TrainingArguments(...) call" in note
    assert "set it as that setting during the run" in note


def test_lightning_settings_come_back_as_keywords_of_the_trainer_call(tmp_path):
    site = _framework_site("lightning", "pl.Trainer(")
    experiments = [_experiment("amp", {"device": "cpu", "dtype": "bfloat16"}, "faster", 1.4),
                   _experiment("reduce_host_work", {"every": 50}, "faster", 1.2)]
    _, run_dir = _run_folder(tmp_path, experiments, None, SCRIPTS / "lightning_slow_data.py", site)
    amp = (run_dir / "changes" / "amp.patch").read_text()
    logging = (run_dir / "changes" / "reduce_host_work.patch").read_text()
    assert re.search(r'^\+ +enable_progress_bar=False, enable_model_summary=False, precision="bf16-mixed"\)$', amp,
                     re.M), amp
    assert "log_every_n_steps=50" in logging, logging
    assert "Lightning's setting on your Trainer(...) call" in (run_dir / "changes" / "amp.md").read_text()


# --------------------------------------------------------------------------- checked by running


def _steps_per_s(script: Path, epochs: int, first: int, last: int) -> float:
    seen = logged_step_times([sys.executable, "-u", str(script), str(epochs)])
    return (last - first) / (seen[last] - seen[first])


@pytest.mark.bench  # a long timing check, run before a release: the bench tier (not in CI)
def test_the_verified_patch_applied_to_a_held_out_script_makes_it_as_fast_as_claimed(tmp_path):
    """`diagnose run` on a copy of a held-out slow-loader script in a folder of its own; `git apply --check` of
    RUN/verified.patch there; `diagnose apply`; then the script and its patched copy run plainly (no diagnose),
    interleaved twice, the best of each: steps/s over whole epochs after the first (worker start-up left out, as
    the experiments' windows leave it), within 20% of the claim."""
    project = tmp_path / "project"
    project.mkdir()
    shutil.copyfile(SCRIPTS / "slow_reader.py", project / "train.py")
    original = tmp_path / "original.py"
    shutil.copyfile(SCRIPTS / "slow_reader.py", original)
    started = time.monotonic()
    run = diagnose_cli("run", "--out", str(tmp_path / "run"), "--warmup", "3", "--steps", "8", "--experiments",
                       "dataloader.num_workers,dataloader.persistent_workers", "--budget-seconds", "90", "train.py",
                       "3", cwd=project, timeout=400)
    assert run.returncode == 0, run.stderr[-3000:]
    run_dir = tmp_path / "run"
    import json

    headline = json.loads((run_dir / "diagnosis.json").read_text())["headline"]
    assert headline["verdict"] == "faster" and headline["patch"] == "verified.patch", headline
    check = subprocess.run(["git", "apply", "--check", str(run_dir / "verified.patch")], cwd=project,
                           capture_output=True, text=True)
    assert check.returncode == 0, check.stderr
    applied = diagnose_cli("apply", str(run_dir), cwd=project, timeout=60)
    assert applied.returncode == 0 and "edited train.py" in applied.stderr, applied.stderr
    assert (project / "train.py.orig").read_text() == original.read_text()
    # 120 steps an epoch: from the second epoch's 10th step to the fourth's end, worker start-up behind
    first, last = 130, 350
    plain, patched_runs = [], []
    for _ in range(2):
        plain.append(_steps_per_s(original, 3, first, last))
        patched_runs.append(_steps_per_s(project / "train.py", 3, first, last))
    measured = max(patched_runs) / max(plain)
    claim = headline["speedup"]
    print(f"claim {claim:.2f}x, measured {measured:.2f}x (plain {plain}, patched {patched_runs}); "
          f"{time.monotonic() - started:.0f} s")
    assert abs(measured / claim - 1) <= 0.2, (claim, measured, plain, patched_runs)
