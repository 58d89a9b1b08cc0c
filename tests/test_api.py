"""The Python API (diagnose.run / analyze / compare / load): the same folders and records as the commands, returned
as typed results that print as the terminal summary and render inline in a notebook."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest
from conftest import REPO, SAMPLES, TRACES, diagnose_cli

import diagnose
from diagnose.api.results import Result
from diagnose.serial import dumps, from_jsonable

TRACE = TRACES / "cpu_only_with_dataloader.json.gz"


@pytest.mark.full  # starts processes (a whole run, the CLI, a script): the full tier
def test_import_diagnose_loads_no_torch_numpy_or_pipeline():
    code = ("import sys, diagnose; heavy = [m for m in ('torch', 'numpy', 'rich', 'diagnose.api.calls', "
            "'diagnose.commands') if m in sys.modules]; print(heavy)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=60)
    assert done.stdout.strip() == "[]", done.stdout + done.stderr


def test_analyze_returns_what_the_command_writes_and_renders_it(tmp_path):
    result = diagnose.analyze(TRACE, out=tmp_path / "api")
    cli = diagnose_cli("analyze", str(TRACE), "--out", str(tmp_path / "cli"))
    assert isinstance(result, diagnose.Result) and result.exit_code == cli.returncode == 0
    on_disk = json.loads((result.path / "diagnosis.json").read_text())
    assert json.loads(dumps(result.diagnosis)) == on_disk
    assert [f["rule"] for f in on_disk["findings"]] == [f.rule for f in result.findings]
    assert result.findings, "this trace spends most of its step in host overhead: a finding is expected"

    text = str(result)  # as the terminal summary ends `diagnose analyze`
    assert result.verdict in text and "Report:" in text and result.findings[0].title in text
    html = result._repr_html_()
    assert result.verdict.split(":")[0] in html and "<svg" in html  # the verdict and the step's breakdown bar
    assert all(f.title in html for f in result.findings) and "report.html" in html

    again = from_jsonable(Result, json.loads(dumps(result)))  # the result round-trips through JSON
    assert again == result
    assert diagnose.load(result.path).diagnosis == result.diagnosis


def test_compare_returns_the_comparison_and_its_exit_code(tmp_path):
    import diagnose.compare.diff  # noqa: F401  (the compare stage's package shares the name: the call must win)

    compared = diagnose.compare(TRACE, TRACE, out=tmp_path / "ab")
    assert compared.exit_code == 0 and (compared.path / "compare.json").exists()
    assert json.loads(dumps(compared.comparison)) == json.loads((compared.path / "compare.json").read_text())
    assert "compare.html" in str(compared) and "Full comparison" in compared._repr_html_()


def test_bad_input_raises_a_user_error_naming_it(tmp_path):
    with pytest.raises(diagnose.UserError, match="not found"):
        diagnose.run(tmp_path / "missing.py")
    with pytest.raises(diagnose.UserError, match="steps=0"):
        diagnose.run(SAMPLES / "slow_loader.py", steps=0)
    with pytest.raises(diagnose.UserError, match="unknown optimization"):
        diagnose.run(SAMPLES / "slow_loader.py", experiments="faster_please")


def test_run_profiles_a_script_and_returns_its_diagnosis(tmp_path, capsys):
    result = diagnose.run(SAMPLES / "slow_loader.py", out=tmp_path / "run", warmup=1, steps=3, experiments="none")
    assert result.exit_code == 0 and result.diagnosis.steps_profiled == 3
    assert result.findings[0].category == "data-loading"
    assert result.report and (result.path / "report.html").exists()
    assert "Training waits for the DataLoader" in result._repr_html_()
