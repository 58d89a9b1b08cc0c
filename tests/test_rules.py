"""Rules are data: each rule file's own cases, load-time validation, user rules, and `diagnose rules`."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from conftest import diagnose_cli

from diagnose import rules as rule_engine
from diagnose.errors import RuleError
from diagnose.expr import Expr, ExprError
from diagnose.model import CATEGORIES, Analysis, SourceLine
from diagnose.optimizations import REGISTRY

BUNDLED = rule_engine.load_rules(optimization_ids=REGISTRY)
REQUIRED_RULE_IDS = {
    "data-loading.slow-loader", "data-loading.too-many-workers", "data-loading.repeated-preprocessing",
    "transfer.pageable-h2d", "utilization.dispatch-bound", "utilization.gpu-underused", "memory.near-capacity",
    "host-overhead.per-step-work", "host-overhead.syncs", "memory.empty-cache", "communication.data-parallel",
    "utilization.tensor-cores-unused", "data-loading.batch-too-small",
}
CASES = [(rule, i, case) for rule in BUNDLED for i, case in enumerate(rule.cases)]


@pytest.mark.parametrize("rule,index,case", CASES, ids=[f"{r.id}-{i}" for r, i, _ in CASES])
def test_rule_case(rule, index, case):
    assert rule.fires(case.metrics) == case.fires, f"{rule.path} case {index}: {case.metrics}"


def test_every_required_rule_ships_with_cases_that_fire_and_do_not():
    by_id = {r.id: r for r in BUNDLED}
    assert REQUIRED_RULE_IDS <= set(by_id)
    for rule in BUNDLED:
        assert rule.category in CATEGORIES
        assert {c.fires for c in rule.cases} == {True, False}, rule.id
        assert rule.fix and rule.docs.startswith("https://"), rule.id


def test_every_rule_renders_its_evidence_and_fix_for_its_firing_cases():
    for rule in BUNDLED:
        for case in (c for c in rule.cases if c.fires):
            metrics = {name: None for name in rule_engine.METRICS} | {"step_time_mean_s": 0.1} | case.metrics
            analysis = _analysis(metrics)
            [finding] = [f for f in rule_engine.evaluate([rule], analysis)]
            assert finding.message and "{{" not in finding.message and "n/a n/a" not in finding.message
            assert finding.severity in ("high", "medium", "low")


def _analysis(metrics: dict) -> Analysis:
    return Analysis(steps=(), step_time_s={"mean": 0.1, "p50": 0.1, "p95": 0.1}, breakdown={}, top_ops=(),
                    host_lines=(), metrics=metrics, locations={"loader": "train.py:12", "host_top": "train.py:30"},
                    step_definition="test")


def test_host_top_code_is_the_code_of_the_host_top_line():
    # torch's own Python (an optimizer loop) tops the list; host_top is the first line of the user's code
    lines = (SourceLine("train.py:40", 0.02, 0.2, "optimizer.step()", in_torch=True),
             SourceLine("train.py:30", 0.01, 0.1, "log_to_disk(loss)"))
    analysis = Analysis(steps=(), step_time_s={}, breakdown={}, top_ops=(), host_lines=lines,
                        metrics={"host_user_frac": 0.1, "host_top_line_frac": 0.1, "host_overhead_frac": 0.3,
                                 "step_time_mean_s": 0.1},
                        locations={"host_top": "train.py:30"}, step_definition="test")
    rule = next(r for r in BUNDLED if r.id == "host-overhead.per-step-work")
    [finding] = rule_engine.evaluate([rule], analysis)
    assert "`log_to_disk(loss)`" in finding.message and "optimizer.step()" not in finding.message
    assert "log_to_disk(loss)" in finding.fix_code and "if step %" not in finding.fix_code


def test_fix_code_without_a_dataloader_does_not_invent_one():
    rule = next(r for r in BUNDLED if r.id == "utilization.dispatch-bound")
    case = next(c for c in rule.cases if c.fires)
    [finding] = rule_engine.evaluate([rule], _analysis({name: None for name in rule_engine.METRICS} | case.metrics))
    assert "DataLoader" not in finding.fix_code and "larger batch" in finding.fix_code
    assert "foreach=True" in finding.fix_code and "torch.optim.Adam" not in finding.fix_code
    [with_loader] = rule_engine.evaluate([rule], _analysis({name: None for name in rule_engine.METRICS} | case.metrics
                                                           | {"loader_batch_size": 8}))
    assert "batch_size=128" in with_loader.fix_code


def test_a_loader_wait_is_either_per_batch_overhead_or_a_slow_loader_never_both():
    # data-loading.batch-too-small and the rules that offer workers must split the wait between them exactly:
    # with num_workers=0 and a noticeable wait, one and only one of slow-loader and batch-too-small fires
    by_id = {r.id: r for r in BUNDLED}
    small, slow, many = (by_id[i] for i in ("data-loading.batch-too-small", "data-loading.slow-loader",
                                            "data-loading.too-many-workers"))
    claimed = {"per-batch": 0, "slow": 0}
    for wait in (0.05, 0.13, 0.5, 0.95):
        for step in (0.0005, 0.001, 0.003, 0.01, 0.05):
            for item in (None, 0.000005, 0.00003, 0.00009, 0.0002, 0.004):
                for workers, cpu_frac in ((0, 0.98), (0, 0.02), (8, 0.98)):
                    metrics = {"data_wait_frac": wait, "step_time_mean_s": step, "dataset_item_s": item,
                               "loader_num_workers": workers, "cpu_count": 2, "dataset_item_cpu_frac": cpu_frac,
                               "loader_batch_size": 2}
                    if small.fires(metrics):
                        assert not slow.fires(metrics) and not many.fires(metrics), metrics
                        claimed["per-batch"] += 1
                    elif workers == 0:
                        assert slow.fires(metrics), metrics
                        claimed["slow"] += 1
    assert min(claimed.values()) >= 10, claimed  # the grid covers both sides of the boundary


def test_severity_follows_the_share_of_step_time():
    assert [rule_engine.severity_for(c) for c in (0.5, 0.2, 0.1, 0.05, 0.01)] == ["high", "high", "medium", "medium",
                                                                                   "low"]


def _write_rule(folder: Path, body: str, name: str = "my.rule.toml") -> Path:
    folder.mkdir(exist_ok=True)
    path = folder / name
    path.write_text(body)
    return path


GOOD_RULE = """
id = "custom.slow-steps"
category = "host-overhead"
title = "Steps are slow"
condition = "step_time_mean_s > 0.05"
cost = "0.3"
evidence = "Mean step {{ step_time_mean_s|ms }}."
fix = "Make it faster."
docs = "https://example.org"
"""


@pytest.mark.parametrize("body,message", [
    (GOOD_RULE.replace("step_time_mean_s > 0.05", "no_such_metric > 1"), "unknown metric(s) no_such_metric"),
    (GOOD_RULE.replace("step_time_mean_s > 0.05", "step_time_mean_s >"), "bad syntax"),
    (GOOD_RULE.replace("step_time_mean_s > 0.05", "__import__('os').system('true')"),
     "only min(), max(), known() and first()"),
    (GOOD_RULE.replace('category = "host-overhead"', 'category = "speed"'), "is not one of"),
    (GOOD_RULE.replace("{{ step_time_mean_s|ms }}", "{{ step_time_mean_s|ms "), "template syntax error"),
    (GOOD_RULE + "\noptimizations = ['turbo']", "unknown optimization id(s) turbo"),
    ("id = [", "not valid TOML"),
    ('id = "x"', "missing category"),
    # wrong types: an error naming the file, never an AttributeError from deep inside
    (GOOD_RULE.replace('"step_time_mean_s > 0.05"', "1"), "condition must be a string"),
    (GOOD_RULE.replace('cost = "0.3"', "cost = [0.3]"), "cost must be a string (an expression) or a number"),
    (GOOD_RULE.replace('evidence = "Mean step {{ step_time_mean_s|ms }}."', "evidence = 3"),
     "evidence must be a string"),
    (GOOD_RULE.replace('fix = "Make it faster."', "fix = ['a']"), "fix must be a string"),
    (GOOD_RULE + "\nfix_code = 42", "fix_code must be a string"),
    (GOOD_RULE.replace('title = "Steps are slow"', "title = true"), "title must be a string"),
    (GOOD_RULE + '\noptimizations = "amp"', "optimizations must be a list of strings"),
    (GOOD_RULE + "\noptimizations = [1]", "optimizations must be a list of strings"),
    (GOOD_RULE + '\npriority = "high"', "priority must be an integer"),
    (GOOD_RULE + "\npriority = 1.5", "priority must be an integer"),
    (GOOD_RULE + "\n[tests]\nfires = true", "tests must be [[tests]] tables"),
    (GOOD_RULE + "\ntests = [1, 2]", "tests must be [[tests]] tables"),
    (GOOD_RULE + "\n[[tests]]\nfires = true", "test case 1: metrics must be a table"),
    (GOOD_RULE + '\n[[tests]]\nmetrics = { step_time_mean_s = "slow" }\nfires = true',
     "test case 1: metrics must be a table of numbers"),
    (GOOD_RULE + "\n[[tests]]\nmetrics = { step_time_mean_s = 0.1 }\nfires = 1",
     "test case 1: fires must be true or false"),
    (GOOD_RULE + "\n[[tests]]\nmetrics = { step_time_mean_s = 0.1 }", "test case 1: fires must be true or false"),
])
def test_bad_rule_files_are_errors_that_name_the_file(tmp_path, body, message):
    path = _write_rule(tmp_path / "rules", body)
    with pytest.raises(RuleError) as info:
        rule_engine.load_rule(path, optimization_ids=REGISTRY)
    assert str(path) in info.value.message and message in info.value.message


def test_cost_may_be_a_number(tmp_path):
    rule = rule_engine.load_rule(_write_rule(tmp_path / "rules", GOOD_RULE.replace('cost = "0.3"', "cost = 0.3")),
                                 optimization_ids=REGISTRY)
    assert rule.cost_of({}) == 0.3


def test_user_rules_folder_adds_rules(tmp_path):
    _write_rule(tmp_path / "rules", GOOD_RULE)
    rules = rule_engine.load_rules([tmp_path / "rules"], optimization_ids=REGISTRY)
    assert "custom.slow-steps" in {r.id for r in rules}
    [finding] = rule_engine.evaluate([r for r in rules if r.id == "custom.slow-steps"],
                                     _analysis({"step_time_mean_s": 0.1}))
    assert finding.message == "Mean step 100.0 ms." and finding.severity == "high"


def test_expressions_treat_unknown_values_as_not_firing():
    expr = Expr("gpu_busy_frac < 0.5")
    assert expr.evaluate({"gpu_busy_frac": None}) is False
    assert Expr("not (peak_memory_frac >= 0.8)").evaluate({"peak_memory_frac": None}) is True
    assert Expr("known(a) and a / b > 1").evaluate({"a": 1.0, "b": 0.0}) is False
    with pytest.raises(ExprError):
        Expr("(lambda: 1)()")


def test_rules_command_lists_every_rule_with_its_explanation():
    proc = diagnose_cli("rules")
    assert proc.returncode == 0, proc.stderr
    for rule in BUNDLED:
        assert rule.id in proc.stdout
    assert "fixes: dataloader.num_workers" in proc.stdout


def test_rules_command_rejects_a_bad_user_rule_with_a_clear_error(tmp_path):
    _write_rule(tmp_path / "rules", GOOD_RULE.replace("step_time_mean_s > 0.05", "bogus > 1"))
    proc = diagnose_cli("rules", "--rules", str(tmp_path / "rules"))
    assert proc.returncode == 2 and "bogus" in proc.stderr and "my.rule.toml" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_rules_command_rejects_a_mistyped_field_without_a_traceback(tmp_path):
    _write_rule(tmp_path / "rules", GOOD_RULE.replace('"step_time_mean_s > 0.05"', "1"))
    proc = diagnose_cli("rules", "--rules", str(tmp_path / "rules"))
    assert proc.returncode == 2 and "condition must be a string" in proc.stderr and "my.rule.toml" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_rules_check_and_metrics_listing():
    assert diagnose_cli("rules", "--check").returncode == 0
    metrics = diagnose_cli("rules", "--metrics").stdout
    assert "data_wait_frac" in metrics and "op_mean_us" in metrics


def test_every_bundled_rule_template_parses_and_names_known_metrics_only():
    # at run time the bundled rules skip this check (it costs 0.1 s per process); here it runs for each file
    for rule in rule_engine.load_rules(optimization_ids=REGISTRY):
        checked = rule_engine.load_rule(rule.path, optimization_ids=REGISTRY, check_templates=True)
        assert checked.id == rule.id


@pytest.mark.full  # starts processes (a whole run, the CLI, a script): the full tier
def test_the_rule_engine_and_its_metric_catalogue_load_without_numpy_or_the_trace_parser():
    # listing rules needs the metric names only, not the analysis that computes them
    code = ("import sys, diagnose.rules; "
            "print([m for m in ('numpy', 'orjson', 'diagnose.trace.load') if m in sys.modules])")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert proc.stdout.strip() == "[]"
