"""Reading back what diagnose wrote: a field this version does not know is said, not dropped in silence; a field
it needs and the file lacks is an error naming it."""
from __future__ import annotations

import json
import shutil
import warnings

import pytest
from conftest import diagnose_cli

from diagnose.errors import UserError
from diagnose.model import Diagnosis, Experiment, Verdict
from diagnose.serial import UnknownFieldsWarning, read_json, write_json


def _experiment(**extra) -> Experiment:
    return Experiment(optimization="amp", setting={}, metric="steps/s", speedup=1.5, ci=(1.2, 1.8),
                      verdict=Verdict.FASTER, loss_drift=None, peak_memory_bytes=None, reason="", **extra)


def test_a_record_round_trips_and_its_verdict_reads_back_equal(tmp_path):
    path = tmp_path / "experiment.json"
    write_json(path, _experiment())
    assert json.loads(path.read_text())["verdict"] == "faster"
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # nothing unknown: no warning
        assert read_json(path, Experiment) == _experiment()


def test_an_unknown_field_is_named_with_its_path_and_the_rest_is_read(tmp_path):
    path = tmp_path / "experiment.json"
    write_json(path, _experiment())
    data = json.loads(path.read_text())
    data["shiny_new_field"] = 3
    path.write_text(json.dumps(data))
    with pytest.warns(UnknownFieldsWarning, match=r"experiment\.json has field\(s\) this version of diagnose does "
                                                  r"not read, ignored: shiny_new_field"):
        assert read_json(path, Experiment).speedup == 1.5


def test_a_missing_field_is_an_error_naming_it(tmp_path):
    path = tmp_path / "experiment.json"
    write_json(path, _experiment())
    data = json.loads(path.read_text())
    del data["verdict"]
    path.write_text(json.dumps(data))
    with pytest.raises(UserError, match=r"cannot read .*experiment\.json: no field verdict \(Experiment\)"):
        read_json(path, Experiment)


def test_report_on_a_folder_with_a_newer_field_says_so_and_still_reports(sample_run, tmp_path):
    run_dir = tmp_path / "run"
    shutil.copytree(sample_run("healthy.py").run_dir, run_dir)
    capture = json.loads((run_dir / "capture.json").read_text())
    capture["environment"]["from_the_future"] = True  # nested: the path names where it is
    (run_dir / "capture.json").write_text(json.dumps(capture))
    proc = diagnose_cli("report", str(run_dir))
    assert proc.returncode == 0, proc.stderr
    assert "note:" in proc.stderr and "ignored: environment.from_the_future" in proc.stderr
    assert "Traceback" not in proc.stderr
    # the diagnosis written again is read back whole
    assert read_json(run_dir / "diagnosis.json", Diagnosis).status == "completed"
