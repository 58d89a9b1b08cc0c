"""The documentation and the code agree (datasette's test_docs style), both ways: every command-line option, rule,
metric, optimization and field of diagnosis.json / compare.json is documented, and nothing documented is missing
from the code. The site builds in mkdocs' strict mode (a broken link or a page left out of nav fails), the pages
generated from the code are current, real outputs validate against the JSON Schemas, and the commands the README
and the guide show on bundled files run.

A failure names the page and the option, rule or field, and what to run or add: after a merge that adds an option or
a field, the message says what to document."""
from __future__ import annotations

import dataclasses
import importlib.util
import json
import os
import re
import shlex
import subprocess
import sys
import typing
from pathlib import Path

import click
import pytest
from conftest import REPO, SAMPLES, TRACES, assert_matches_schema, diagnose_cli

from diagnose import model

DOCS = REPO / "docs"
README = REPO / "README.md"
PAGES = sorted(DOCS.rglob("*.md"))
CLI_PAGE = DOCS / "reference" / "cli.md"


def _docs_module(name: str):
    """docs/generate.py or docs/schemas.py, imported from its file (docs/ is not a package)."""
    spec = importlib.util.spec_from_file_location(f"docs_{name}", DOCS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _where(path: Path) -> str:
    return str(path.relative_to(REPO))


# ------------------------------------------------------------------------------------------------ the site


@pytest.mark.full  # starts processes (a whole run, the CLI, a script): the full tier
def test_the_site_builds_in_strict_mode(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
                          cwd=REPO, capture_output=True, text=True, timeout=240,
                          env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    problems = [line for line in proc.stderr.splitlines() if "WARNING" in line or "ERROR" in line]
    assert proc.returncode == 0, "mkdocs build --strict failed:\n" + "\n".join(problems or [proc.stderr[-3000:]])
    assert (tmp_path / "site" / "reference" / "cli" / "index.html").is_file()


def test_every_page_is_in_the_navigation():
    """mkdocs only warns at INFO level about a page left out of nav: a page nobody can reach."""
    nav = (REPO / "mkdocs.yml").read_text()
    unlisted = [_where(page) for page in PAGES if f": {page.relative_to(DOCS).as_posix()}" not in nav]
    assert unlisted == [], f"pages missing from mkdocs.yml's nav: {unlisted}"


def test_the_generated_reference_pages_are_current():
    stale = _docs_module("generate").stale_pages()
    assert stale == [], (f"docs/reference/{', '.join(stale)} not current with the code: run "
                         "`.venv/bin/python docs/generate.py` and commit the result")


# ------------------------------------------------------------------------------------------------ the CLI


def _commands() -> dict[str, click.Command]:
    from diagnose.cli import cli

    return dict(cli.commands)


def _options_of(command: click.Command) -> set[str]:
    return {opt for param in command.params if isinstance(param, click.Option)
            for opt in (*param.opts, *param.secondary_opts)} | {"--help", "-h"}


def _reference_options() -> dict[str, set[str]]:
    """`## diagnose NAME` -> the options its `- `--opt METAVAR`: help` lines name, in docs/reference/cli.md."""
    documented: dict[str, set[str]] = {}
    command = None
    for line in CLI_PAGE.read_text().splitlines():
        if match := re.match(r"## diagnose (\S+)", line):
            command = documented.setdefault(match.group(1), set())
        elif command is not None and (match := re.match(r"- `([^`]+)`", line)):
            command.update(token for token in re.split(r"[ ,/]+", match.group(1)) if token.startswith("-"))
    return documented


def test_every_command_and_option_is_in_the_cli_reference():
    documented = _reference_options()
    missing = [f"diagnose {name} {opt}" for name, command in _commands().items()
               for opt in sorted(_options_of(command) - documented.get(name, set()))]
    missing += [f"diagnose {name} (the whole command)" for name in _commands() if name not in documented]
    assert missing == [], (f"not in {_where(CLI_PAGE)}: {missing}; run `.venv/bin/python docs/generate.py`")


def test_the_cli_reference_documents_nothing_that_does_not_exist():
    commands = _commands()
    extra = [f"diagnose {name} {opt}" for name, options in _reference_options().items()
             for opt in sorted(options - (_options_of(commands[name]) if name in commands else set()))]
    assert extra == [], f"{_where(CLI_PAGE)} documents what the CLI does not have: {extra}"


def _shown_commands() -> list[tuple[str, list[str]]]:
    """Every diagnose command line the README and the docs show, in code blocks or inline code:
    ("page:line", [subcommand, args...])."""
    shown = []
    for page in [README, *PAGES]:
        lines = page.read_text().splitlines()
        fence = None
        for number, line in enumerate(lines, start=1):
            if line.startswith("```"):
                fence = None if fence is not None else line[3:].strip()
                continue
            texts = [line] if fence in ("", "bash", "console", "shell") else []
            texts += [] if fence is not None else re.findall(r"`([^`]*\bdiagnose [a-z]+[^`]*)`", line)
            for text in texts:
                text = text.strip().removeprefix("$ ")
                try:
                    tokens = shlex.split(text, comments=True)
                except ValueError:
                    continue
                for at, token in enumerate(tokens):
                    if token.endswith("diagnose") and at + 1 < len(tokens) and tokens[at + 1] in _commands():
                        shown.append((f"{_where(page)}:{number}", tokens[at + 1:]))
                        break
    return shown


def test_commands_shown_in_the_docs_use_options_that_exist():
    from diagnose.cli import cli

    group = click.Context(cli, info_name="diagnose", **cli.context_settings)
    wrong = []
    shown = _shown_commands()
    assert len(shown) >= 20, shown  # the scan finds the docs' commands
    for where, (name, *args) in shown:
        command = cli.commands[name]
        try:
            ctx = command.make_context(name, list(args), parent=group)
        except click.NoSuchOption as exc:
            wrong.append(f"{where}: diagnose {name} has no option {exc.option_name}")
            continue
        except click.ClickException:
            continue  # a placeholder value (N, PCT) where a number goes: the option itself exists
        script = ctx.params.get("script")
        if isinstance(script, str) and script.startswith("-"):  # `run`/`capture` pass unknown options on as SCRIPT
            wrong.append(f"{where}: diagnose {name} has no option {script.partition('=')[0]}")
    assert wrong == [], "\n".join(wrong)


# ------------------------------------------------------------------------------------------------ rules, metrics


def _all_text() -> str:
    return "\n".join(page.read_text() for page in [README, *PAGES])


def test_every_rule_and_metric_is_in_the_reference_and_nothing_else():
    from diagnose.analysis.metrics import METRICS
    from diagnose.commands.rules import load_rules

    rules_page = (DOCS / "reference" / "rules.md").read_text()
    metrics_page = (DOCS / "reference" / "metrics.md").read_text()
    rule_ids = {rule.id for rule in load_rules(())}
    documented_rules = set(re.findall(r"^### (\S+)$", rules_page, re.M))
    documented_metrics = set(re.findall(r"^\| `(\w+)` \|", metrics_page, re.M))
    assert sorted(rule_ids - documented_rules) == [], "rules missing from docs/reference/rules.md"
    assert sorted(documented_rules - rule_ids) == [], "docs/reference/rules.md documents rules that do not exist"
    assert sorted(set(METRICS) - documented_metrics) == [], "metrics missing from docs/reference/metrics.md"
    assert sorted(documented_metrics - set(METRICS)) == [], "docs/reference/metrics.md documents unknown metrics"


CGROUP_FILES = {"memory.events", "memory.max", "memory.high", "memory.oom_control", "memory.limit_in_bytes"}


def test_rule_ids_named_in_the_docs_exist():
    from diagnose.commands.rules import load_rules

    categories = "|".join(re.escape(c) for c in model.CATEGORIES)
    named = set(re.findall(rf"`((?:{categories})\.[a-z0-9-]+)`", _all_text())) - CGROUP_FILES
    unknown = sorted(named - {rule.id for rule in load_rules(())})
    assert unknown == [], f"the docs name rules that do not exist: {unknown}"


def test_every_optimization_is_documented_in_the_experiments_guide():
    from diagnose.optimizations import REGISTRY

    guide = (DOCS / "guide" / "experiments.md").read_text()
    assert [oid for oid in REGISTRY if f"`{oid}`" not in guide] == [], "optimizations missing from the guide"


# ------------------------------------------------------------------------------------------------ written files


def _schema(name: str) -> dict:
    return json.loads((DOCS / "reference" / f"{name}.schema.json").read_text())


@pytest.mark.parametrize("name", ["diagnosis", "compare"])
def test_the_schema_has_every_field_of_the_dataclasses_and_no_other(name):
    schemas = _docs_module("schemas")
    root, path = schemas.roots()[name]
    defs = _schema(name)["$defs"]
    problems = []
    for cls in schemas.dataclasses_under(root):
        if cls.__name__ not in defs:
            problems.append(f"{_where(path)} has no $defs.{cls.__name__} ({name}.json holds it): add "
                            f"\"{cls.__name__}\": {json.dumps(schemas.definition(cls, schemas.field_comments()))}")
            continue
        properties = defs[cls.__name__].get("properties", {})
        hints = typing.get_type_hints(cls)
        for f in dataclasses.fields(cls):
            if f.name not in properties:
                suggestion = json.dumps(schemas.property_schema(hints[f.name]))
                problems.append(f"{cls.__name__}.{f.name} is not in {_where(path)}: add to "
                                f"$defs.{cls.__name__}.properties \"{f.name}\": {suggestion} with a description "
                                f"(`python docs/schemas.py {name} {cls.__name__}.{f.name}`)")
        fields = {f.name for f in dataclasses.fields(cls)}
        problems += [f"{_where(path)} documents $defs.{cls.__name__}.properties.{extra}: {cls.__name__} has no such "
                     "field" for extra in properties if extra not in fields]
        required = set(defs[cls.__name__].get("required", []))
        needed = {f.name for f in dataclasses.fields(cls)
                  if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING}
        if required != needed:
            problems.append(f"{_where(path)} $defs.{cls.__name__}.required should be {sorted(needed)}")
    known = {cls.__name__ for cls in schemas.dataclasses_under(root)}
    problems += [f"{_where(path)} defines $defs.{extra}, which {name}.json does not hold" for extra in defs
                 if extra not in known]
    assert problems == [], "\n".join(problems)


@pytest.mark.parametrize("page, classes", [
    ("diagnosis-json.md", (model.Diagnosis, model.Experiment, model.Headline, model.Finding,
                           model.BudgetReport, model.PhaseStat, model.Startup)),
    ("compare-json.md", (model.Comparison, model.CompareSide, model.StepChange, model.AmountChange,
                         model.FindingChange, model.GateResult)),
])
def test_every_field_of_the_written_files_is_described_in_its_page(page, classes):
    text = (DOCS / "reference" / page).read_text()
    undocumented = [f"{cls.__name__}.{f.name}" for cls in classes for f in dataclasses.fields(cls)
                    if f"`{f.name}`" not in text and f'"{f.name}"' not in text]
    assert undocumented == [], f"fields not described in docs/reference/{page}"


def test_every_key_of_the_documented_diagnosis_example_exists():
    text = (DOCS / "reference" / "diagnosis-json.md").read_text()
    example = re.search(r"```json\n(.*?)```", text, re.S).group(1)
    keys = set(re.findall(r'"([a-z_0-9]+)":', example))
    fields = {f.name for cls in (model.Diagnosis, model.Experiment, model.Headline, model.Finding)
              for f in dataclasses.fields(cls)}
    breakdown = set(model.BUCKETS)
    step_times = {"mean", "p50", "p95", "unprofiled"}
    inside_values = {"data_wait_frac", "num_workers"}  # a metric's name, an optimization's setting
    assert keys - fields - breakdown - step_times - inside_values == set()


def _validate(name: str, written: Path) -> None:
    assert_matches_schema(name, written)  # the fault paths' outputs are validated by their own tests, with it


@pytest.mark.parametrize("trace", ["h200/transformer_fp32.pt.trace.json.gz", "a100_rank0_of16_host_syncs.json.gz"])
def test_diagnose_analyze_writes_what_the_schema_says(tmp_path, trace):
    proc = diagnose_cli("analyze", "--out", str(tmp_path / "out"), str(TRACES / trace))
    assert proc.returncode in (0, 1), proc.stderr  # 1: a trace is no run (status analyzed)
    _validate("diagnosis", tmp_path / "out" / "diagnosis.json")


@pytest.mark.full  # starts processes (a whole run, the CLI, a script): the full tier
def test_diagnose_run_and_compare_write_what_the_schemas_say(tmp_path):
    """A real run (capture, unprofiled window, memory, FLOPs, startup) and a compare of it with itself."""
    from conftest import FAST, run_script

    run = run_script(SAMPLES / "slow_loader.py", out=tmp_path / "run", options=FAST)
    assert run.returncode == 0, run.stderr[-3000:]
    _validate("diagnosis", run.run_dir / "diagnosis.json")
    proc = diagnose_cli("compare", "--out", str(tmp_path / "cmp"), str(run.run_dir), str(run.run_dir),
                        "--fail-if-slower", "50")
    assert proc.returncode == 0, proc.stderr
    _validate("compare", tmp_path / "cmp" / "compare.json")


# ------------------------------------------------------------------------------------------------ shown commands


def _runnable(prefix: str) -> list[tuple[str, list[str]]]:
    """The shown `diagnose PREFIX ...` commands whose files are all in this repository."""
    runnable = []
    for where, (name, *args) in _shown_commands():
        paths = [a for a in args if "/" in a and not a.startswith("-")]
        if name == prefix and paths and all((REPO / p).exists() for p in paths):
            runnable.append((where, [name, *args]))
    return runnable


@pytest.mark.parametrize("where, command", [pytest.param(*shown, id=shown[0]) for shown in _runnable("analyze")])
def test_the_analyze_commands_shown_run(tmp_path, where, command):
    proc = diagnose_cli(*command, "--out", str(tmp_path / "out"))
    assert proc.returncode in (0, 1) and (tmp_path / "out" / "report.html").is_file(), (
        f"{where}: `diagnose {' '.join(command)}` exited {proc.returncode}\n{proc.stderr[-3000:]}")


def _guide_runs() -> list:
    """The guide's `diagnose run` commands on bundled scripts, once each (the README's main command has its own
    test). A GPU sample is left to benchmarks/gpu_check.sh (on a CPU machine it needs `--device cpu`), and a
    command run under another (`prlimit ... diagnose run`) to tests/test_memory_limits.py."""
    seen, runs = set(), []
    for where, command in _runnable("run"):
        page, _, line = where.partition(":")
        shown = (REPO / page).read_text().splitlines()[int(line) - 1].strip().removeprefix("$ ")
        if (where.startswith("docs/") and shown.startswith("diagnose ") and tuple(command) not in seen
                and not any("cuda_train.py" in arg for arg in command)):
            seen.add(tuple(command))
            runs.append(pytest.param(where, command, id=where))
    return runs


@pytest.mark.full  # a whole run, timed by nothing it asserts: the full tier (it runs beside another test)
@pytest.mark.timeout(600)
@pytest.mark.parametrize("where, command", _guide_runs())
def test_the_run_commands_shown_in_the_guide_run_on_the_bundled_samples(tmp_path, where, command):
    """Each as written, its experiments left out (`--experiments none` after the page's options: the experiments'
    measurements have tests of their own): the options and the script's arguments are accepted, the script is
    diagnosed, and the exit code is one the page's outcome has (0, or 5 where it shows an out-of-memory run)."""
    name, *args = command
    script_at = next(i for i, a in enumerate(args) if a.endswith(".py"))
    options = list(args[:script_at])
    if "--out" in options:  # the page's own folder (`--out before`) goes to the test's, not into the checkout
        del options[options.index("--out"):options.index("--out") + 2]
    proc = diagnose_cli(name, "--out", str(tmp_path / "run"), *options, "--experiments", "none",
                        *args[script_at:], timeout=540)
    assert proc.returncode in (0, 5), f"{where}: exited {proc.returncode}\n{proc.stderr[-3000:]}"
    _validate("diagnosis", tmp_path / "run" / "diagnosis.json")


README_SETUP_AND_TESTS = ("python3 -m venv .venv && .venv/bin/pip install -q -c constraints.txt -e '.[test]' "
                          "&& .venv/bin/python -m pytest")
README_SETUP_AND_RUN = ("python3 -m venv .venv && .venv/bin/pip install -c constraints.txt -e . "
                        "&& .venv/bin/diagnose run sample_runs/slow_loader.py")


def test_the_readme_shows_the_two_commands_ci_runs():
    """The front page's set-up commands are the ones .ci/run runs in a fresh clone."""
    text = README.read_text()
    assert README_SETUP_AND_TESTS in text and README_SETUP_AND_RUN in text
    assert ".venv/bin/pip install -q -c constraints.txt -e '.[test]'" in (REPO / ".ci" / "run").read_text()


@pytest.mark.slow
def test_the_readme_main_command_gives_the_transcript_it_shows(readme_run):
    """`diagnose run sample_runs/slow_loader.py`, as the README shows it (its experiments and their default budget
    included): the verdict and the verified change are the ones the transcript shows, and what it writes, experiments
    included, is what the schema says."""
    proc = readme_run
    assert proc.returncode == 0, proc.stderr[-3000:]
    shown = README.read_text()
    for line in ("Bottleneck: data loading, 98% of step time. Training waits for the DataLoader "
                 "(sample_runs/slow_loader.py:54).", "Verified: 2 changes"):
        assert line in shown
    said = proc.stdout + proc.stderr  # diagnose's own lines, beside the script's
    assert "Bottleneck: data loading, 9" in said and "Training waits for the DataLoader" in said, said[-3000:]
    assert "Verified: " in said and "dataloader.num_workers" in said, said[-3000:]
    _validate("diagnosis", proc.run_dir / "diagnosis.json")  # with experiments, a headline, predictions
