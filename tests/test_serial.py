"""Reading back what diagnose wrote: a field this version does not know is said, not dropped in silence; a field
it needs and the file lacks is an error naming it."""
from __future__ import annotations

import json
import shutil
import warnings
from typing import Optional

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


# -- the records' definitions: diagnose.lean_dataclass behaves as dataclass(frozen=True) does ------------------------
def _pair():
    """The same record twice: by the standard decorator, and by the lean one model.py uses."""
    import dataclasses

    from diagnose import lean_dataclass

    made = []
    for decorate, make_field in ((dataclasses.dataclass(frozen=True), dataclasses.field),
                                 (lean_dataclass.dataclass(frozen=True), lean_dataclass.field)):
        @decorate
        class Reading:
            domain: str
            joules: Optional[float]
            steps: int = 0
            notes: tuple = make_field(default_factory=tuple)
        made.append(Reading)
    return made


CALLS = [  # (args, kwargs): each gives the same record, or the same TypeError, either way
    pytest.param(("gpu", 1.5), {}, id="positional, defaults"),
    pytest.param(("gpu",), {"joules": None, "steps": 3, "notes": ("a",)}, id="keywords"),
    pytest.param((), {"domain": "host", "joules": 2.0}, id="all by keyword"),
    pytest.param(("gpu",), {}, id="a required field missing"),
    pytest.param(("gpu", 1.0, 2, (), "extra"), {}, id="too many"),
    pytest.param(("gpu", 1.0), {"domain": "x"}, id="a field given twice"),
    pytest.param(("gpu", 1.0), {"watts": 3}, id="an unknown field"),
]


@pytest.mark.parametrize(("args", "kwargs"), CALLS)
def test_a_lean_record_is_built_as_a_standard_frozen_dataclass_is(args, kwargs):
    import dataclasses

    standard, lean = _pair()
    try:
        expected = dataclasses.asdict(standard(*args, **kwargs))
    except TypeError:
        with pytest.raises(TypeError):
            lean(*args, **kwargs)
        return
    record = lean(*args, **kwargs)
    assert dataclasses.asdict(record) == expected
    assert repr(record) == repr(standard(*args, **kwargs)).replace(standard.__qualname__, lean.__qualname__)


def test_a_lean_record_is_a_frozen_value():
    import dataclasses

    _, lean = _pair()
    one, same, other = lean("gpu", 1.0), lean("gpu", 1.0), lean("gpu", 2.0)
    assert one == same and hash(one) == hash(same) and one != other and len({one, same, other}) == 2
    assert one.notes == () and lean("gpu", 1.0, notes=("a",)).notes == ("a",)
    with pytest.raises(dataclasses.FrozenInstanceError):
        one.joules = 3.0
    with pytest.raises(dataclasses.FrozenInstanceError):
        del one.domain
    assert dataclasses.replace(one, joules=2.0) == other and dataclasses.is_dataclass(one)
    assert [f.name for f in dataclasses.fields(lean)] == ["domain", "joules", "steps", "notes"]
