"""The recorded runs (tests/recorded_runs.py): each, reported again today from its capture's files, gives the
diagnosis its run gave, in the schema, with a report and a summary that say it; and a run today still writes what
each record holds (full tier: it runs the samples)."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from conftest import assert_matches_schema
from markupsafe import escape
from recorded_runs import DERIVED, RECORDED, RENDERED, RUNS, relocate

NAMES = sorted(RECORDED)
FIELD_NAME = re.compile(r"[a-z_][a-z0-9_]*")


def _recorded(name: str, file: str) -> dict:
    return json.loads((RUNS / name / file).read_text())


def _findings(diagnosis: dict) -> list[tuple]:
    return [(f["rule"], f["severity"], Path(f["location"]).name if f["location"] else "", f["optimizations"])
            for f in diagnosis["findings"]]


@pytest.mark.parametrize("name", NAMES)
def test_a_recorded_run_reported_again_gives_the_diagnosis_its_run_gave(recorded_run, name):
    run = recorded_run(name)
    assert run.returncode == 0, run.stderr
    then, now = _recorded(name, "diagnosis.json"), run.diagnosis
    assert _findings(now) == _findings(then)
    assert now["breakdown"] == pytest.approx(then["breakdown"], abs=1e-9)
    assert now["step_time_s"] == pytest.approx(then["step_time_s"], rel=1e-9)
    assert now["steps_profiled"] == then["steps_profiled"] and now["status"] == then["status"]


@pytest.mark.parametrize("name", NAMES)
def test_a_recorded_runs_diagnosis_is_what_the_schema_says(recorded_run, name):
    assert_matches_schema("diagnosis", recorded_run(name).run_dir / "diagnosis.json")


@pytest.mark.parametrize("name", NAMES)
def test_a_recorded_runs_report_shows_each_finding_self_contained(recorded_run, name):
    run = recorded_run(name)
    html = (run.run_dir / "report.html").read_text()
    for finding in run.findings:
        assert str(escape(finding["title"])) in html
    for loads_something in ("<script", "<link", "<img", "<iframe", "@import", "url(http", "src="):
        assert loads_something not in html  # styles and SVG charts are inline: it opens offline
    assert f"Report:  {run.run_dir / 'report.html'}" in run.stderr.splitlines()
    if run.findings:
        assert run.findings[0]["title"] in run.stderr  # the terminal's summary leads with the top finding


@pytest.mark.full  # runs each sample: the full tier
@pytest.mark.parametrize("name", NAMES)
def test_a_run_today_writes_what_its_record_holds(tmp_path, sample_run, name):
    """The record is still what a run writes: the same files, the same fields in each, the same status and steps.
    (Not the same findings: a finding's share of the step moves with the machine's load; the quick tier checks
    that today's analysis gives the recorded inputs the recorded diagnosis.) A failure here: record again with
    `python tests/recorded_runs.py NAME` and look at what changed."""
    recorded = RECORDED[name]
    run = sample_run(str(Path(recorded.script).relative_to("sample_runs")), *recorded.args, options=recorded.options)
    assert run.returncode == 0, run.stderr  # (the session's run of the sample, which other full tests share)
    fresh, kept = run.run_dir, relocate(name, tmp_path / "kept")
    assert _names(fresh) == _names(kept)
    for file in ("config.json", "capture.json", *[d for d in DERIVED if d.endswith(".json")]):
        now_json, then_json = json.loads((fresh / file).read_text()), json.loads((kept / file).read_text())
        empty = _empty_lists(now_json) | _empty_lists(then_json)  # no items on one side: no fields to compare
        moving = tuple(empty) + (VERDICT_FIELDS if file == "diagnosis.json" else ())
        differ = {k for k in _keys(now_json) ^ _keys(then_json) if not k.startswith(moving)}
        assert not differ, (file, sorted(differ))
    now, then = json.loads((fresh / "diagnosis.json").read_text()), _recorded(name, "diagnosis.json")
    assert (now["status"], now["steps_profiled"]) == (then["status"], then["steps_profiled"])


# what the experiments verified moves with the machine's load (a headline only when a change was verified faster, the
# settings its changes name): the record's files and the other fields are compared, these are not
VERDICT_FIELDS = ("headline", "experiments.", "predictions.")


def _names(folder: Path) -> set[str]:
    """Its files, a trace by its rank (the rest of its name is a process id and a time), gzipped or not."""
    names = set()
    for path in folder.rglob("*"):
        if path.is_file() and not path.name.endswith((".fifo", ".tmp", *RENDERED)) and "sandbox" not in path.parts \
                and not _what_the_experiments_verified(path.relative_to(folder)):
            relative = path.relative_to(folder)
            if path.name.endswith((".pt.trace.json", ".pt.trace.json.gz")):
                relative = relative.with_name(path.name.split(".")[0] + ".trace")
            names.add(str(relative))
    return names


def _what_the_experiments_verified(relative: Path) -> bool:
    """The timed runs' folders and the hand-backs: which settings ran and which were verified moves with the
    machine's speed, as the findings do."""
    return relative.parts[0] in ("experiments", "changes") or relative.name.startswith("verified.")


def _keys(value, prefix: str = "") -> set[str]:
    """Every field's path in a JSON value (a list's items under []). A key that is not a name (`your code`, `the
    first step` in the start-up's places) is data, not a field: what a run met, left out with what lies under it."""
    if isinstance(value, dict):
        return {k for key, item in value.items() if FIELD_NAME.fullmatch(key)
                for k in {prefix + key} | _keys(item, prefix + key + ".")}
    if isinstance(value, list):
        return set().union(*(_keys(item, prefix + "[].") for item in value)) if value else set()
    return set()


def _empty_lists(value, prefix: str = "") -> set[str]:
    """The paths of the empty lists in a JSON value, as _keys names their items' fields (`host_lines.[].`)."""
    if isinstance(value, dict):
        return set().union(*(_empty_lists(item, prefix + key + ".") for key, item in value.items()
                             if FIELD_NAME.fullmatch(key)))
    if isinstance(value, list):
        if not value:
            return {prefix + "[]."}
        return set().union(*(_empty_lists(item, prefix + "[].") for item in value))
    return set()
