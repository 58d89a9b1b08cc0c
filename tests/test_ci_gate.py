"""The interleaved CI gate (`compare --live`, `run --baseline-ref`): its statistics on pair ratios given as data,
the command line's refusals, and the revision checked out without touching the repository. The gate's false-alarm
rate and power on real processes are the slow tests at the end (benchmarks/gate_trials.py repeats them)."""
from __future__ import annotations

import json
import math
import os
import random
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import SCRIPTS

from diagnose.cli import main
from diagnose.commands.live import check_revision, checked_out
from diagnose.compare.interleaved import gate_decision, interval, pair_log_ratios, verdict
from diagnose.errors import UserError
from diagnose.model import LiveWindow

GATE_STEP = SCRIPTS / "gate_step.py"


def windows(*sides_and_step_ms: tuple[str, float]) -> list[LiveWindow]:
    return [LiveWindow(side, 10, 10 * ms / 1000) for side, ms in sides_and_step_ms]


def test_windows_pair_with_their_neighbour_in_abba_order_and_a_window_left_alone_makes_no_pair():
    ratios = pair_log_ratios(windows(("A", 10), ("B", 11), ("B", 22), ("A", 20), ("A", 10)))
    assert [round(math.exp(r), 6) for r in ratios] == [1.1, 1.1]
    assert pair_log_ratios([LiveWindow("A", 0, 0.0), *windows(("B", 10), ("A", 10))]) == (0.0,)


def test_a_drift_the_two_sides_share_cancels_in_their_pairs():
    drift = (1.0, 1.3, 1.6, 0.9)  # the machine's speed, pair by pair: 60% apart
    order = (("A", "B"), ("B", "A"), ("A", "B"), ("B", "A"))
    timed = [(side, (10.5 if side == "B" else 10.0) * d) for d, pair in zip(drift, order) for side in pair]
    found = interval([pair_log_ratios(windows(*timed))])
    assert found.ratio == pytest.approx(1.05, rel=1e-9)
    assert found.ci[1] / found.ci[0] == pytest.approx(1.0, abs=1e-4)


def noisy_rounds(true_ratio: float, pair_sd: float, process_sd: float, rounds: int, pairs: int, seed: int):
    rng = random.Random(seed)
    out = []
    for _ in range(rounds):
        luck = rng.gauss(0, process_sd)
        out.append([math.log(true_ratio) + luck + rng.gauss(0, pair_sd) for _ in range(pairs)])
    return out


def test_the_interval_holds_the_true_ratio_99_times_in_100_or_so():
    # as measured on a shared 2-core machine: a pair's ratio spreads 11-17%, fresh processes 0-1.4% beyond it
    found = [interval(noisy_rounds(1.05, 0.12, 0.004, 4, 150, seed)) for seed in range(300)]
    held = sum(f.ci[0] <= 1.05 <= f.ci[1] for f in found)
    assert held >= 0.97 * 300, held


def test_bursts_that_hit_either_side_are_trimmed_and_a_cost_only_b_pays_now_and_then_is_kept():
    rng = random.Random(7)
    calm = [[math.log(1.05) + rng.gauss(0, 0.05) for _ in range(200)] for _ in range(3)]
    either = [[x + rng.choice((-0.6, 0.6)) if rng.random() < 0.1 else x for x in r] for r in calm]
    trimmed = interval(either)
    assert trimmed.trim == 0.2
    assert trimmed.ratio == pytest.approx(1.05, rel=0.01)
    width = trimmed.ci[1] / trimmed.ci[0]
    assert width < interval(calm).ci[1] / interval(calm).ci[0] * 1.5  # the bursts barely widen it
    b_only = [[x + 0.6 if i % 10 == 0 else x for i, x in enumerate(r)] for r in calm]  # B's every tenth window
    kept = interval(b_only)
    assert kept.trim == 0.0  # the far pairs all lean to B's side: the plain mean counts B's cost
    assert kept.ratio == pytest.approx(1.05 * math.exp(0.06), rel=0.01)


def test_fresh_processes_own_luck_widens_the_interval_and_is_reported():
    calm = interval(noisy_rounds(1.0, 0.03, 0.0, 4, 16, seed=1))
    lucky = [[x + shift for x in r] for r, shift in zip(noisy_rounds(1.0, 0.03, 0.0, 4, 16, seed=1),
                                                         (0.04, -0.04, 0.05, -0.05))]
    moved = interval(lucky)
    assert calm.process_sd < 0.01 and moved.process_sd > 0.03
    assert math.log(moved.ci[1] / moved.ci[0]) > 2 * math.log(calm.ci[1] / calm.ci[0])
    assert moved.df < calm.df  # the rounds' own degrees of freedom, not the pairs'


def test_one_pair_is_not_an_interval():
    assert interval([[0.05]]) is None
    assert interval([]) is None


@pytest.mark.parametrize("ci, allowed, decision", [
    ((1.035, 1.07), 3, "fail"),  # even the fast end is over the 3% allowed
    ((0.98, 1.02), 3, "pass"),  # even the slow end is within it
    ((1.01, 1.06), 3, "undecided"),  # 3% lies inside
    ((1.04, 1.09), 5, "undecided"),
])
def test_the_gate_decides_on_the_interval_not_the_ratio(ci, allowed, decision):
    assert gate_decision(ci, allowed) == decision


@pytest.mark.parametrize("ci, said", [
    ((1.02, 1.08), "slower"), ((0.9, 0.97), "faster"), ((0.97, 1.03), "no-change"),
    ((0.5, 2.1), "undecided"),  # cannot tell a 2x gain from a 2x loss
])
def test_an_interval_too_wide_to_tell_a_gain_from_a_loss_is_undecided(ci, said):
    assert verdict(ci) == said


@pytest.mark.parametrize("args, said", [
    (["compare", "--live", "a.py", "b.py", "--run-noise", "0.02"], "--run-noise does not apply to --live"),
    (["compare", "--live", "a.py", "b.py", "--force"], "--force does not apply to --live"),
    (["compare", "runs/a", "runs/b", "--", "--epochs", "3"], "script arguments (after --) go with --live"),
    (["run", "--fail-if-slower", "5", "train.py"], "--fail-if-slower needs --baseline or --baseline-ref"),
    (["run", "--baseline", "old", "--baseline-ref", "HEAD", "train.py"], "--baseline and --baseline-ref both"),
    (["run", "--baseline-ref", "HEAD", "--run-noise", "0.02", "train.py"], "--run-noise needs --baseline"),
    (["compare", "--live", "missing_a.py", "missing_b.py"], "missing_a.py"),
    (["run", "--baseline-ref", "HEAD", "train.py"], "needs train.py inside a git repository"),
])
@pytest.mark.full  # starts processes (a whole run, the CLI, a script): the full tier
def test_the_command_line_refuses_what_it_cannot_do_and_says_why(args, said, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("COLUMNS", "300")
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path.parent))  # tmp_path is in no repository
    (tmp_path / "train.py").write_text("pass\n")
    monkeypatch.setattr(sys, "argv", ["diagnose", *args])
    with pytest.raises(SystemExit) as exited:
        main()
    said_there = capsys.readouterr().err.replace("\n", " ")
    assert exited.value.code == 2, said_there
    assert said in said_there
    assert "Traceback" not in said_there
    assert not (tmp_path / "diagnose_runs").exists()  # refused before any run folder was made


@pytest.fixture()
def repository(tmp_path) -> Path:
    """A git repository holding gate_step.py at two commits: LAYERS 20, then 21 (5% more work a step)."""
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    repo = tmp_path / "project"
    repo.mkdir()

    def git(*args):
        subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t", *args], check=True,
                       capture_output=True)
    git("init", "-q")
    script = repo / "train.py"
    script.write_text(GATE_STEP.read_text())
    git("add", "train.py")
    git("commit", "-qm", "twenty layers")
    script.write_text(GATE_STEP.read_text().replace("LAYERS = 20", "LAYERS = 21"))
    git("commit", "-qam", "one more layer")
    return repo


def tree_state(repo: Path) -> tuple:
    status = subprocess.run(["git", "-C", str(repo), "status", "--porcelain", "--ignored"], capture_output=True,
                            text=True, check=True).stdout
    files = sorted((p.relative_to(repo).as_posix(), p.stat().st_mtime_ns) for p in repo.rglob("*")
                   if p.is_file() and ".git" not in p.relative_to(repo).parts)  # git refreshes its own index
    worktrees = subprocess.run(["git", "-C", str(repo), "worktree", "list"], capture_output=True, text=True).stdout
    return status, files, worktrees


@pytest.mark.full  # starts processes (a whole run, the CLI, a script): the full tier
def test_the_revision_is_checked_out_apart_and_the_repository_is_left_as_it_was(repository):
    before = tree_state(repository)
    with checked_out(str(repository / "train.py"), "HEAD~1") as (tree, repo):
        assert repo == repository.resolve()
        assert "LAYERS = 20" in (tree / "train.py").read_text()
        assert not tree.resolve().is_relative_to(repository.resolve())
    assert not tree.exists()
    assert "LAYERS = 21" in (repository / "train.py").read_text()
    assert tree_state(repository) == before


@pytest.mark.full  # starts processes (a whole run, the CLI, a script): the full tier
def test_a_revision_without_the_script_or_a_script_outside_git_is_named(repository, tmp_path):
    with pytest.raises(UserError, match="does not exist at --baseline-ref no-such-branch"):
        check_revision(str(repository / "train.py"), "no-such-branch")
    (repository / "new.py").write_text("pass\n")
    with pytest.raises(UserError, match="new.py does not exist at --baseline-ref HEAD"):
        check_revision(str(repository / "new.py"), "HEAD")
    outside = tmp_path / "loose"
    outside.mkdir()
    (outside / "train.py").write_text("pass\n")
    with pytest.raises(UserError, match="needs .*train.py inside a git repository"):
        check_revision(str(outside / "train.py"), "HEAD")


# The gate's power and false-alarm rate on real processes: what the CI gate is for. One trial each here; five each
# in benchmarks/gate_trials.py (docs/guide/ci-gate.md has the figures).

@pytest.mark.bench  # a run and an interleaved comparison, about three minutes; the bench tier: not in CI
@pytest.mark.timeout(600)
def test_a_change_that_does_5_percent_more_work_fails_the_gate_at_3_percent(repository, tmp_path):
    done = subprocess.run([sys.executable, "-m", "diagnose", "run", "--experiments", "none", "--baseline-ref", "HEAD~1",
                           "--fail-if-slower", "3", "--budget-seconds", "220", "--out", str(tmp_path / "run"),
                           "train.py", "--", "--steps", "400000"],
                          cwd=repository, capture_output=True, text=True, timeout=560)
    live = json.loads((tmp_path / "run" / "live.json").read_text())
    assert done.returncode == 4, (done.stdout[-2000:], done.stderr[-3000:])
    assert live["gate"]["decision"] == "fail" and live["a"]["revision"] == "HEAD~1"
    assert 1.03 < live["ci"][0] and live["ratio"] < 1.12, live
    assert "FAILED" in done.stderr


@pytest.mark.bench  # one interleaved comparison of a script with itself, 2-3 minutes; the bench tier: not in CI
@pytest.mark.timeout(600)
def test_a_script_against_itself_passes_the_gate_at_3_percent(tmp_path):
    done = subprocess.run([sys.executable, "-m", "diagnose", "compare", "--live", str(GATE_STEP), str(GATE_STEP),
                           "--fail-if-slower", "3", "--budget-seconds", "220", "--out", str(tmp_path / "live")],
                          capture_output=True, text=True, timeout=560)
    live = json.loads((tmp_path / "live" / "live.json").read_text())
    assert done.returncode == 0, done.stderr[-3000:]
    assert live["gate"]["decision"] == "pass" and live["stopped"] == "decided", live["ci"]
    assert live["ci"][0] < 1.0 < live["ci"][1]
    if hasattr(os, "sched_setaffinity"):  # one thread, no workers: each round pinned both sides to one CPU
        assert all(r["pinned_cpu"] is not None for r in live["rounds"]), [r["pinned_cpu"] for r in live["rounds"]]


def test_a_side_says_when_ready_its_process_threads_and_workers():
    from diagnose.experiments.turns import parse_ready_line, parse_window_line, ready_line, window_line

    assert parse_ready_line(ready_line(4242, 1, 0)) == (4242, 1, 0)
    assert parse_ready_line(window_line(9, 0.1, 576)) is None
    assert parse_window_line(window_line(9, 0.1, None)) == (9, 0.1, None)
