"""RunRecord, the run folder's one owner: each file round-trips through its save and load, a missing one loads as
None, a damaged one is a UserError that says what to do, the ranks' folders read as one job, the user's files are
told apart from diagnose's; and no module outside diagnose/record opens a run folder's files."""
from __future__ import annotations

import ast
import json
from dataclasses import replace
from pathlib import Path

import pytest

from diagnose.errors import UserError
from diagnose.model import (
    Analysis,
    Diagnosis,
    ExperimentResults,
    MachinePeaks,
    Measurement,
    Peak,
    RunConfig,
    Status,
    StepBreakdown,
)
from diagnose.record.layout import RunFolder
from diagnose.record.run_record import RunRecord

PACKAGE = Path(__file__).resolve().parents[1] / "diagnose"
RECORDED = Path(__file__).parent / "data" / "runs" / "compiled_branch"  # a real run's capture.json


def _capture():
    return RunRecord(RECORDED).capture()


def _analysis() -> Analysis:
    buckets = {"data_wait": 0.06, "compute": 0.04}
    return Analysis(steps=(StepBreakdown(0, 0.0, 0.1, buckets),), step_time_s={"mean": 0.1, "p50": 0.1, "p95": 0.1},
                    breakdown={k: v / 0.1 for k, v in buckets.items()}, top_ops=(), host_lines=(), metrics={},
                    locations={}, step_definition="test")


def _measurement(status: str = Status.COMPLETED) -> Measurement:
    return Measurement(status=status, windows=(), applied=(), startup_s=1.0, first_step_s=0.1, losses=(),
                       peak_memory_bytes=None, steps_seen=20)


def test_each_file_round_trips_through_its_save_and_load(tmp_path):
    record = RunRecord(tmp_path)
    saved = {
        "config": RunConfig("train.py", ("--epochs", "2"), str(tmp_path), 5, 20, 60.0),
        "capture": _capture(),
        "analysis": _analysis(),
        "diagnosis": Diagnosis(schema=1, script="train.py", steps_profiled=1, step_time_s={"mean": 0.1},
                               breakdown={"compute": 1.0}, findings=(), experiments=(), status="completed"),
        "experiments": ExperimentResults(),
        "measure": _measurement(),
        "peaks": MachinePeaks("cpu", (Peak("cpu0", "float32", 100e9, "measured"),)),
    }
    for name, value in saved.items():
        written = getattr(record, f"save_{name}")(value)
        assert written.exists() and written.parent == tmp_path
    assert {name: getattr(RunRecord(tmp_path), name)() for name in saved} == saved
    assert not list(tmp_path.glob("*.tmp"))  # the writes are atomic: no temporary file is left


def test_a_file_not_written_loads_as_none_and_a_missing_folder_is_named(tmp_path):
    record = RunRecord(tmp_path)
    assert (record.capture(), record.analysis(), record.diagnosis(), record.samples()) == (None, None, None, None)
    assert record.ranks() == {} and record.trace_paths() == [] and record.run_capture() is None
    with pytest.raises(UserError, match="run folder not found") as raised:
        RunRecord.existing(tmp_path / "nowhere")
    assert "diagnose run" in raised.value.hint


@pytest.mark.parametrize("text", ['{"status": "completed", "scr', '{"neither": "field"}'])
def test_a_damaged_or_foreign_file_is_a_user_error_that_says_what_to_do(tmp_path, text):
    (tmp_path / RunFolder.capture.name).write_text(text)
    with pytest.raises(UserError, match="cannot read") as raised:
        RunRecord(tmp_path).capture()
    assert "damaged or was written by another version" in raised.value.hint


def test_ranks_folders_are_records_and_their_captures_merge_into_the_runs(tmp_path):
    record = RunRecord(tmp_path)
    capture = _capture()
    failed = replace(capture, status=Status.SCRIPT_ERROR, error=None)
    for rank in (0, 1):
        record.rank(rank).path.mkdir(parents=True)
    record.rank(0).save_capture(capture)
    record.rank(1).save_capture(failed)
    (record.files.ranks / "notes").mkdir()  # not a rank's folder
    assert list(record.ranks()) == [0, 1] and record.ranks()[1].path == tmp_path / "ranks" / "rank1"
    merged = record.run_capture()
    assert merged.status == Status.SCRIPT_ERROR and merged.ranks == (0, 1)
    assert not record.has_capture()  # a command that only reads leaves the folder as it was
    assert record.merge_rank_captures() == merged and record.capture() == merged
    assert record.first_failed_rank() is None  # torchrun said nothing: the ranks' own errors decide
    record.save_launcher_failure(1, 1, [0, 1])
    assert record.first_failed_rank() == 1


def test_a_jobs_measurement_is_its_own_else_its_ranks(tmp_path):
    record = RunRecord(tmp_path)
    assert record.job_measurement() is None
    for rank in (0, 1):
        record.rank(rank).path.mkdir(parents=True)
    record.rank(0).save_measure(_measurement())
    record.rank(1).save_measure(_measurement(Status.CRASHED))
    assert record.job_measurement().status == Status.CRASHED  # a failed rank's speaks for the job
    record.save_measure(_measurement())
    assert record.job_measurement().status == Status.COMPLETED


def test_traces_are_the_profilers_by_rank_and_a_trace_being_written_is_not_one(tmp_path):
    record = RunRecord(tmp_path)
    record.files.tb.mkdir()
    for name in ("rank0.host.pt.trace.json", "rank1.host.pt.trace.json.gz", "rank1.host.pt.trace.json.gz.123.tmp",
                 "notes.txt"):
        (record.files.tb / name).write_text("{}")
    assert [p.name for p in record.trace_paths()] == ["rank0.host.pt.trace.json", "rank1.host.pt.trace.json.gz"]
    assert {r: p.name for r, p in record.rank_trace_paths().items()} == {0: "rank0.host.pt.trace.json",
                                                                         1: "rank1.host.pt.trace.json.gz"}


def test_the_users_files_are_told_apart_from_diagnoses(tmp_path):
    record = RunRecord(tmp_path)
    assert not record.has_own_config() and record.foreign_entries() == []
    record.save_config(RunConfig("train.py", (), str(tmp_path), 5, 20, 60.0))
    record.save_analysis(_analysis())
    (tmp_path / "analysis.json.77.tmp").write_text("")  # another rank's atomic write, half done
    assert record.has_own_config() and record.foreign_entries() == []
    (tmp_path / "notes.md").write_text("mine")
    assert record.foreign_entries() == ["notes.md"]
    (tmp_path / RunFolder.config.name).write_text(json.dumps({"lr": 0.1}))  # another program's config.json
    assert not record.has_own_config() and record.foreign_entries() == ["config.json", "notes.md"]


def test_the_scripts_log_reads_as_text_and_as_nothing_before_it_ran(tmp_path):
    record = RunRecord(tmp_path)
    assert record.script_log() == ""
    record.files.script_log.write_bytes(b"step 1\n\xff\n")
    assert record.script_log() == "step 1\n\ufffd\n"  # a script's odd bytes do not stop the reading


def test_a_timed_runs_or_a_ranks_folder_lies_in_its_run(tmp_path):
    record = RunRecord(tmp_path)
    record.save_config(RunConfig("train.py", (), str(tmp_path), 5, 20, 60.0))
    timed = RunRecord(record.files.experiment_runs / "01-baseline")
    timed.path.mkdir(parents=True)
    assert timed.outermost().path == tmp_path.resolve() and record.rank(3).outermost().path == tmp_path.resolve()
    assert [r.path.name for r in record.experiment_runs("*-baseline")] == ["01-baseline"]


def _outside_the_record():
    return sorted(p for p in PACKAGE.rglob("*.py") if "_data" not in p.parts and p.parent.name != "record")


def test_only_the_record_opens_a_run_folders_files():
    """The done-when of issue 54: RunFolder (the file names) and serial's read_json/write_json are the record's;
    outside it, `record.files` gives only the paths of what others stream into (logs, traces, HTML, pipes)."""
    typed = {name for name, entry in vars(RunFolder).items()
             if hasattr(entry, "name") and not name.startswith("_") and entry.name.endswith(".json")}
    found = []
    for path in _outside_the_record():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            where = f"{path.relative_to(PACKAGE.parent)}:{getattr(node, 'lineno', 0)}"
            if isinstance(node, ast.Name) and node.id == "RunFolder":
                found.append(f"{where} RunFolder")
            elif isinstance(node, ast.ImportFrom) and node.module in ("diagnose.record.layout", "diagnose.serial"):
                found += [f"{where} imports {a.name}" for a in node.names if a.name in ("RunFolder", "read_json",
                                                                                         "write_json")]
            elif (isinstance(node, ast.Attribute) and node.attr in typed and isinstance(node.value, ast.Attribute)
                  and node.value.attr == "files"):
                found.append(f"{where} .files.{node.attr}: load or save it through the RunRecord")
            elif (isinstance(node, ast.Attribute) and node.attr in ("read_text", "read_bytes")
                  and isinstance(node.value, ast.Attribute) and isinstance(node.value.value, ast.Attribute)
                  and node.value.value.attr == "files"):
                found.append(f"{where} reads .files.{node.value.attr}: read it through the RunRecord")
    assert found == [], "a run folder's files are opened outside diagnose/record:\n" + "\n".join(found)
