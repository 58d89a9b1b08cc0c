"""`diagnose report RUN` re-renders from the run folder; templates can be overridden; --json prints the contract."""
from __future__ import annotations

import json
import shutil

import pytest
from conftest import SAMPLES, TRACES, diagnose_cli, run_script

from diagnose.analysis.metric_values import sample_metrics
from diagnose.model import Samples


def test_report_command_rerenders_with_user_templates_and_extra_rules(sample_run, tmp_path):
    run_dir = tmp_path / "copy"
    shutil.copytree(sample_run("slow_loader.py").run_dir, run_dir)
    templates = tmp_path / "templates"
    templates.mkdir()
    (templates / "report.html.j2").write_text("<p>custom {{ view.verdict }} {{ '<b>' }}</p>")
    rules = tmp_path / "rules"
    rules.mkdir()
    (rules / "steps.toml").write_text(
        'id = "team.any-steps"\ncategory = "host-overhead"\ntitle = "Team rule"\ncondition = "steps_profiled > 0"\n'
        'cost = "0.01"\nevidence = "{{ steps_profiled|int }} steps"\nfix = "none"\n')
    proc = diagnose_cli("report", str(run_dir), "--templates", str(templates), "--rules", str(rules), "--json")
    assert proc.returncode == 0, proc.stderr
    html = (run_dir / "report.html").read_text()
    assert html.startswith("<p>custom Bottleneck: data loading") and "&lt;b&gt;" in html  # autoescaped
    diagnosis = json.loads(proc.stdout)
    assert "team.any-steps" in {f["rule"] for f in diagnosis["findings"]}
    assert diagnosis == json.loads((run_dir / "diagnosis.json").read_text())


def test_report_command_on_a_missing_folder_is_a_clear_error(tmp_path):
    proc = diagnose_cli("report", str(tmp_path / "nope"))
    assert proc.returncode == 2 and "run folder not found" in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.full  # starts processes (a whole run, the CLI, a script): the full tier
def test_json_flag_prints_only_the_diagnosis_on_stdout(tmp_path):
    run = run_script(SAMPLES / "slow_loader.py", out=tmp_path / "run",
                     options=("--warmup", "1", "--steps", "3", "--json", "--experiments", "none"))
    assert run.returncode == 0, run.stderr
    diagnosis = json.loads(run.stdout)
    assert diagnosis["schema"] == 1 and diagnosis["steps_profiled"] == 3
    assert "epoch 0 step 0" in run.stderr  # the script's own prints moved to stderr


@pytest.mark.full  # starts processes (a whole run, the CLI, a script): the full tier
def test_unknown_experiment_id_is_rejected_before_running(tmp_path):
    proc = diagnose_cli("run", "--out", str(tmp_path / "run"), "--experiments", "turbo",
                        str(SAMPLES / "slow_loader.py"))
    assert proc.returncode == 2 and "unknown optimization id(s) turbo" in proc.stderr


def test_nvml_samples_become_separate_gpu_utilization_metric():
    # No GPU here: these are the values the NVML sampler records, written by hand.
    samples = Samples(t_s=(0.0, 0.1, 0.2, 0.3), process_cpu_frac=(0.5, 0.5, 0.5, 0.5),
                      gpu_util_frac=(0.0, 0.8, 0.6, None), gpu="available", window_s=(0.05, 0.35))
    metrics = sample_metrics(samples)
    assert metrics["gpu_util_mean_frac"] == 0.7 and metrics["process_cpu_frac"] == 0.5


def test_cpu_only_samples_leave_gpu_utilization_unknown():
    samples = Samples(t_s=(0.0, 0.1), process_cpu_frac=(0.2, 0.4), gpu="unavailable: no CUDA device")
    assert sample_metrics(samples)["gpu_util_mean_frac"] is None


@pytest.mark.full  # starts processes (a whole run, the CLI, a script): the full tier
def test_mistyped_option_is_a_usage_error_not_a_missing_script(tmp_path):
    proc = diagnose_cli("run", "--out", str(tmp_path / "run"), "--step", "5", str(SAMPLES / "slow_loader.py"))
    assert proc.returncode == 2 and "no such option" in proc.stderr.lower() and "--step" in proc.stderr
    assert "--steps" in proc.stderr  # click's suggestion
    assert "script not found" not in proc.stderr and not (tmp_path / "run").exists()


@pytest.mark.full  # starts processes (a whole run, the CLI, a script): the full tier
def test_missing_templates_folder_is_an_error_before_anything_runs(tmp_path):
    proc = diagnose_cli("run", "--out", str(tmp_path / "run"), "--templates", str(tmp_path / "nope"),
                        str(SAMPLES / "slow_loader.py"))
    assert proc.returncode == 2 and "templates folder not found" in proc.stderr and "Traceback" not in proc.stderr
    assert not (tmp_path / "run").exists()


@pytest.mark.full  # starts processes (a whole run, the CLI, a script): the full tier
def test_template_syntax_error_is_reported_before_the_run(tmp_path):
    templates = tmp_path / "templates"
    templates.mkdir()
    (templates / "report.html.j2").write_text("<h1>{{ view.title }}</h1>\n{% if view.findings %}\n<p>unclosed\n")
    proc = diagnose_cli("run", "--out", str(tmp_path / "run"), "--templates", str(templates),
                        str(SAMPLES / "slow_loader.py"))
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "report.html.j2" in proc.stderr and "endif" in proc.stderr
    assert not (tmp_path / "run").exists()


def test_report_refuses_a_folder_that_is_not_a_run_folder(tmp_path):
    folder = tmp_path / "photos"
    folder.mkdir()
    (folder / "cat.jpg").write_bytes(b"not a run")
    proc = diagnose_cli("report", str(folder))
    assert proc.returncode == 2 and "not a run folder" in proc.stderr and "Traceback" not in proc.stderr
    assert [p.name for p in folder.iterdir()] == ["cat.jpg"]  # nothing written there


def test_report_checks_templates_before_writing(sample_run, tmp_path):
    run_dir = tmp_path / "run"
    shutil.copytree(sample_run("slow_loader.py").run_dir, run_dir)
    before = {p: p.read_bytes() for p in run_dir.rglob("*") if p.is_file()}
    proc = diagnose_cli("report", str(run_dir), "--templates", str(tmp_path / "nope"))
    assert proc.returncode == 2 and "templates folder not found" in proc.stderr
    assert {p: p.read_bytes() for p in run_dir.rglob("*") if p.is_file()} == before


def test_report_refuses_a_project_folder_with_its_own_config_and_traces(tmp_path):
    # a user's folder that merely looks like a run: its config.json, report.html and trace must stay as they are
    project = tmp_path / "project"
    (project / "tb").mkdir(parents=True)
    (project / "config.json").write_text('{"hidden_size": 768, "architectures": ["Bert"]}')
    (project / "report.html").write_text("<p>my notes</p>")
    shutil.copy(TRACES / "cpu_only_with_dataloader.json.gz", project / "tb" / "w.pt.trace.json.gz")
    before = {p: p.read_bytes() for p in project.rglob("*") if p.is_file()}
    proc = diagnose_cli("report", str(project))
    assert proc.returncode == 2 and "not a run folder" in proc.stderr and "diagnose analyze" in proc.stderr
    assert {p: p.read_bytes() for p in project.rglob("*") if p.is_file()} == before


