"""The written contracts and the README agree (datasette's test_docs style): every field of diagnosis.json and
compare.json, as their dataclasses define them, is documented in the README's section for that file."""
from __future__ import annotations

import dataclasses
import re

import pytest
from conftest import REPO

from diagnose import model

README = (REPO / "README.md").read_text()


def _section(heading: str) -> str:
    start = README.index(heading)
    following = re.search(r"\n##+ ", README[start + len(heading):])
    return README[start:start + len(heading) + following.start()] if following else README[start:]


def _undocumented(section: str, *classes) -> list[str]:
    return [f"{cls.__name__}.{f.name}" for cls in classes for f in dataclasses.fields(cls)
            if f"`{f.name}`" not in section and f'"{f.name}"' not in section]


@pytest.mark.parametrize("heading, classes", [
    ("### diagnosis.json (schema 1)", (model.Diagnosis, model.Experiment, model.Headline, model.Finding,
                                      model.BudgetReport, model.PhaseStat, model.Startup, model.RunCost,
                                      model.RunCostOption, model.RunLength)),
    ("### compare.json (schema 1)", (model.Comparison, model.CompareSide, model.StepChange, model.AmountChange,
                                    model.FindingChange, model.GateResult, model.RunCostChange)),
])
def test_every_field_of_the_written_files_is_documented(heading, classes):
    assert _undocumented(_section(heading), *classes) == []


def test_every_key_of_the_documented_diagnosis_example_exists():
    example = re.search(r"```json\n(.*?)```", _section("### diagnosis.json (schema 1)"), re.S).group(1)
    keys = set(re.findall(r'"([a-z_0-9]+)":', example))
    fields = {f.name for cls in (model.Diagnosis, model.Experiment, model.Headline, model.Finding)
              for f in dataclasses.fields(cls)}
    breakdown = {"data_wait", "h2d", "compute", "communication", "host_overhead", "other"}
    step_times = {"mean", "p50", "p95", "unprofiled"}
    inside_values = {"data_wait_frac", "num_workers"}  # a metric's name, an optimization's setting
    assert keys - fields - breakdown - step_times - inside_values == set()
