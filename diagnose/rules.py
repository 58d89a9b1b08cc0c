"""Rules are data: one TOML file per rule (see rules/). This module loads and validates them, evaluates their
conditions on an Analysis's metrics and renders their evidence and fix text into Findings."""
from __future__ import annotations

import functools
from dataclasses import replace
from pathlib import Path
from typing import Collection, Iterable, Optional

import jinja2
import tomllib
from jinja2 import meta
from jinja2.sandbox import SandboxedEnvironment

import diagnose.frameworks.catalog as frameworks
from diagnose.analysis.metrics import METRICS
from diagnose.errors import RuleError
from diagnose.expr import Expr, ExprError
from diagnose.formatting import NUMBER_FILTERS, display_location, fmt_int
from diagnose.lean_dataclass import dataclass
from diagnose.model import CATEGORIES, Analysis, Finding, FrameworkSite, stated_step_s
from diagnose.resources import bundled

SEVERITY_FROM_COST = (("high", 0.20), ("medium", 0.05))  # XProf's tiers for input-bound runs
# A step at this share of its dtype's peak or more computes as well-tuned training does (published MFU of large
# runs: 33-58%): what remains is worth fixing, but it is not what holds training back, so no finding is high.
WELL_TUNED_MFU = 0.40
# a rule's cost: step time a fix removes at most (speedup) or at least (floor), a rank, a share of the whole run
PREDICTS = ("speedup", "floor", "rank", "run-share")
CEILINGS = {"mfu": "its dtype's peak", "mfu_best_dtype": "the fastest dtype's peak"}
MOST_PREDICTED = 100.0  # a cost of the whole step: the bound says "up to 100x", not infinity
LOCATION_KEYS = ("loader", "optimizer", "model", "host_top", "sync", "compile", "graph_break", "ddp", "accumulation",
                 "fsdp")
REQUIRED = ("id", "category", "title", "condition", "cost", "evidence", "fix")
STRING_FIELDS = ("id", "category", "title", "condition", "evidence", "fix", "fix_code", "location", "docs",
                 "explanation", "predicts", "ceiling", "each")
# a rule that gives one finding per site of a kind: the sites (a list of the template's context), the metric each
# site's own share stands in for, and the location key its own place fills
EACH = {"graph_break": ("graph_breaks", "compile_break_frac", "graph_break")}
TEMPLATE_EXTRAS = {"locations", "host_top_code", "loader_location", "host_top_location", "optimizer_location", "syncs",
                   "step_s", "graph_breaks", "recompiles", "compile_location", "site"}


def _environment() -> SandboxedEnvironment:
    env = SandboxedEnvironment(undefined=jinja2.StrictUndefined, autoescape=False, keep_trailing_newline=False)
    env.filters.update(NUMBER_FILTERS, int=fmt_int, loc=display_location)
    return env


ENV = _environment()


@dataclass(frozen=True)
class RuleCase:
    metrics: dict
    fires: bool


@dataclass(frozen=True)
class Rule:
    id: str
    category: str
    title: str
    condition: Expr
    cost: Expr
    evidence: "LazyTemplate"
    fix: str
    fix_code: Optional["LazyTemplate"]
    optimizations: tuple[str, ...]
    location: Optional[str]
    docs: str
    path: Path
    cases: tuple[RuleCase, ...]
    explanation: str
    priority: int = 0  # breaks ties in cost: the more specific diagnosis first
    predicts: str = "speedup"  # speedup: the cost is step time the fix removes; rank: it only ranks the finding
    ceiling: str = "mfu"  # the speed-of-light metric that bounds the cost: mfu, or mfu_best_dtype for dtype changes
    each: str = ""  # "": one finding; a key of EACH: one finding per site of that kind (`site` in its templates)

    def fires(self, metrics: dict) -> bool:
        return bool(self.condition.evaluate(metrics))

    def cost_of(self, metrics: dict) -> float:
        value = self.cost.evaluate(metrics)
        return max(0.0, min(1.0, float(value))) if value is not None else 0.0


def severity_for(cost: float) -> str:
    for severity, threshold in SEVERITY_FROM_COST:
        if cost >= threshold:
            return severity
    return "low"


def load_rule(path: Path, *, optimization_ids: Collection[str], check_templates: bool = True) -> Rule:
    """One rule file. `optimization_ids`: those a rule may name (the optimizations' registry, which this stage
    comes before, so its caller passes them). `check_templates`: parse its Jinja templates now, so that an error
    names the file (the bundled rules skip it at run time: the test suite checks them, and parsing them all
    costs 0.1 s)."""
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise RuleError(f"rule file {path}: not valid TOML: {exc}")
    missing = [k for k in REQUIRED if k not in data or data[k] == ""]
    if missing:
        raise RuleError(f"rule file {path}: missing {', '.join(missing)}")
    problems = _type_problems(data)
    if problems:  # caught here, so a typo in a rule is an error naming its file, not a traceback
        raise RuleError(f"rule file {path}: {'; '.join(problems)}")
    if data["category"] not in CATEGORIES:
        raise RuleError(f"rule file {path}: category {data['category']!r} is not one of {', '.join(CATEGORIES)}")
    condition, cost = _expr(path, "condition", data["condition"]), _expr(path, "cost", str(data["cost"]))
    unknown_opts = [o for o in data.get("optimizations", []) if o not in optimization_ids]
    if unknown_opts:
        raise RuleError(f"rule file {path}: unknown optimization id(s) {', '.join(unknown_opts)}")
    if data.get("location") not in (None, *LOCATION_KEYS):
        raise RuleError(f"rule file {path}: location must be one of {', '.join(LOCATION_KEYS)}")
    if data.get("predicts", "speedup") not in PREDICTS:
        raise RuleError(f"rule file {path}: predicts must be one of {', '.join(PREDICTS)}")
    if data.get("each", "") not in ("", *EACH):
        raise RuleError(f"rule file {path}: each must be one of {', '.join(EACH)}")
    if data.get("ceiling", "mfu") not in CEILINGS:
        raise RuleError(f"rule file {path}: ceiling must be one of {', '.join(CEILINGS)}")
    return Rule(
        id=data["id"], category=data["category"], title=data["title"], condition=condition, cost=cost,
        evidence=_template(path, "evidence", data["evidence"], check_templates), fix=data["fix"].strip(),
        fix_code=_template(path, "fix_code", data["fix_code"], check_templates) if data.get("fix_code") else None,
        optimizations=tuple(data.get("optimizations", [])), location=data.get("location"),
        docs=data.get("docs", ""), path=path, cases=_cases(path, data.get("tests", [])),
        explanation=data.get("explanation", "").strip(), priority=data.get("priority", 0),
        predicts=data.get("predicts", "speedup"), ceiling=data.get("ceiling", "mfu"), each=data.get("each", ""),
    )


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _type_problems(data: dict) -> list[str]:
    problems = [f"{k} must be a string" for k in STRING_FIELDS if k in data and not isinstance(data[k], str)]
    if not isinstance(data["cost"], str) and not _is_number(data["cost"]):
        problems.append("cost must be a string (an expression) or a number")
    if "priority" in data and (not isinstance(data["priority"], int) or isinstance(data["priority"], bool)):
        problems.append("priority must be an integer")
    optimizations = data.get("optimizations", [])
    if not isinstance(optimizations, list) or not all(isinstance(o, str) for o in optimizations):
        problems.append("optimizations must be a list of strings (optimization ids)")
    return problems + _case_problems(data.get("tests", []))


def _case_problems(tests) -> list[str]:
    if not isinstance(tests, list) or not all(isinstance(t, dict) for t in tests):
        return ["tests must be [[tests]] tables"]
    problems = []
    for number, case in enumerate(tests, start=1):
        metrics = case.get("metrics")
        if not isinstance(metrics, dict) or not all(_is_number(v) or isinstance(v, bool) for v in metrics.values()):
            problems.append(f"test case {number}: metrics must be a table of numbers")
        if not isinstance(case.get("fires"), bool):
            problems.append(f"test case {number}: fires must be true or false")
    return problems


def _expr(path: Path, field: str, source: str) -> Expr:
    try:
        expr = Expr(source)
    except ExprError as exc:
        raise RuleError(f"rule file {path}: {field}: {exc}")
    unknown = sorted(expr.names - METRICS.keys())
    if unknown:
        raise RuleError(f"rule file {path}: {field} names unknown metric(s) {', '.join(unknown)}",
                        "`diagnose rules --metrics` lists the metrics a rule can use")
    return expr


class LazyTemplate:
    """A rule's template: checked when the rule loads, compiled the first time its rule fires (most never do,
    and compiling every template costs more than analysing a mid-sized trace)."""

    def __init__(self, source: str):
        self.source = source
        self._compiled: Optional[jinja2.Template] = None

    def render(self, context: dict) -> str:
        if self._compiled is None:
            self._compiled = ENV.from_string(self.source)
        return self._compiled.render(context)


def _template(path: Path, field: str, source: str, check: bool = True) -> LazyTemplate:
    if not check:
        return LazyTemplate(source)
    try:
        names = meta.find_undeclared_variables(ENV.parse(source))
    except jinja2.TemplateSyntaxError as exc:
        raise RuleError(f"rule file {path}: {field}: template syntax error: {exc.message}")
    unknown = sorted(names - METRICS.keys() - TEMPLATE_EXTRAS)
    if unknown:
        raise RuleError(f"rule file {path}: {field} uses unknown name(s) {', '.join(unknown)}")
    return LazyTemplate(source)


def _cases(path: Path, raw: list) -> tuple[RuleCase, ...]:
    cases = []
    for case in raw:
        metrics = case["metrics"]
        unknown = sorted(set(metrics) - METRICS.keys())
        if unknown:
            raise RuleError(f"rule file {path}: test case names unknown metric(s) {', '.join(unknown)}")
        cases.append(RuleCase(metrics=metrics, fires=case["fires"]))
    return tuple(cases)


def load_rules(extra_dirs: Iterable[Path] = (), *, optimization_ids: Collection[str]) -> list[Rule]:
    """The bundled rules, then the user's; a user rule with the same id replaces the bundled one."""
    files = []
    for folder in (bundled("rules"), *extra_dirs):
        folder = Path(folder)
        if not folder.is_dir():
            raise RuleError(f"rules folder not found: {folder}", "pass a folder of .toml rule files to --rules")
        users = folder != bundled("rules")
        files += [(str(p), p.stat().st_mtime_ns, users) for p in sorted(folder.glob("*.toml"))]
    return list(_load_files(tuple(files), frozenset(optimization_ids)))


@functools.lru_cache(maxsize=8)
def _load_files(files: tuple[tuple[str, int, bool], ...], optimization_ids: frozenset[str]) -> tuple[Rule, ...]:
    """Loaded once per process for the same files (each run checks the rules before it starts, then uses them)."""
    rules: dict[str, Rule] = {}
    for path, _, users in files:
        rule = load_rule(Path(path), optimization_ids=optimization_ids, check_templates=users)
        rules[rule.id] = rule
    return tuple(rules.values())


def evaluate(rules: list[Rule], analysis: Analysis) -> list[Finding]:
    metrics = {**dict.fromkeys(METRICS), **analysis.metrics}
    context = _context(analysis)
    fired = [(rule, finding) for rule in rules if rule.fires(metrics)
             for finding in _findings(rule, metrics, context, analysis.framework)]
    fired.sort(key=lambda pair: (pair[1].cost_fraction, pair[0].priority), reverse=True)
    return _not_training(metrics, [finding for _, finding in fired])


def _findings(rule: Rule, metrics: dict, context: dict, framework: Optional[FrameworkSite]) -> list[Finding]:
    """The rule's finding; for a rule of each site, one per site, its own share and place in the templates (one
    finding as for any rule where the sites are not known)."""
    sites = context.get(EACH[rule.each][0]) if rule.each else None
    if not sites:
        return [_finding(rule, metrics, context, framework)]
    _, metric, location_key = EACH[rule.each]
    found = []
    for site in sites:
        own = {**metrics, metric: site.cost_frac if site.cost_frac is not None else metrics.get(metric)}
        where = {**context["locations"], location_key: display_location(site.location)}
        found.append(_finding(rule, own, {**context, **own, "site": site, "locations": where}, framework))
    return found


def _not_training(metrics: dict, findings: list[Finding]) -> list[Finding]:
    """A run whose loss is NaN or inf learns nothing: its speed findings stay, saying so."""
    if metrics.get("loss_nonfinite") != 1:
        return findings
    step = metrics.get("loss_nonfinite_step")
    since = f" from step {int(step)}" if step is not None else ""
    return [f if f.category == "training" else
            replace(f, message=f"(The run was not training: its loss was not finite{since}.) {f.message}")
            for f in findings]


def _context(analysis: Analysis) -> dict:
    locations = {k: display_location(v) for k, v in analysis.locations.items()}
    metrics = analysis.metrics
    # the step time the report states: the one timed without the profiler when measured, else the profiled mean
    step_s = stated_step_s({"unprofiled": metrics.get("step_time_unprofiled_s"),
                            "mean": metrics.get("step_time_mean_s")})
    return {**dict.fromkeys(METRICS), **metrics, "step_s": step_s, "locations": locations,
            "loader_location": locations.get("loader") or "your DataLoader",
            "host_top_location": locations.get("host_top") or "your training loop",
            "optimizer_location": locations.get("optimizer") or "where your optimizer is built",
            "host_top_code": _host_top_code(analysis), "syncs": analysis.syncs,
            "graph_breaks": analysis.compiled.breaks if analysis.compiled else (),
            "recompiles": analysis.compiled.recompiles if analysis.compiled else (),
            "compile_location": locations.get("compile") or "where the model is compiled",
            "site": None}  # a rule of each site: the site its finding is about


def _host_top_code(analysis: Analysis) -> str:
    """The code of the line named host_top: analysis picks the first host line in the user's own code
    (in_torch False), so the first line (which may be torch's Python) can be a different one."""
    host_top = analysis.locations.get("host_top")
    return next((h.code for h in analysis.host_lines if not h.in_torch and h.location == host_top), "")


def predicted_cost(rule: Rule, metrics: dict) -> tuple[float, str, str]:
    """The rule's cost, no more than the speed of light leaves, its severity, and what bounded either. A step at
    49% of its peak cannot lose 90% of its time to anything that keeps its FLOPs and dtype: at most 51%."""
    cost = rule.cost_of(metrics)
    if rule.predicts not in ("speedup", "floor"):
        return cost, severity_for(cost), ""
    reached = metrics.get(rule.ceiling)
    basis = ""
    if reached is not None and reached >= 1:  # past the peak: the peak was measured low (a busy machine), no bound
        reached = None
    if reached is not None and cost > 1 - reached:
        cost = max(0.0, 1 - reached)
        basis = (f"at most {cost:.0%} of the step: it already reaches {reached:.0%} of {CEILINGS[rule.ceiling]} "
                 f"(rule estimate {rule.cost_of(metrics):.0%})")
    severity = severity_for(cost)
    mfu = metrics.get("mfu")
    if severity == "high" and rule.ceiling == "mfu" and mfu is not None and mfu >= WELL_TUNED_MFU:
        severity = "medium"
        basis = "; ".join(filter(None, [basis, f"medium, not high: the step reaches {mfu:.0%} of its dtype's peak, as "
                                               f"well-tuned training does"]))
    return cost, severity, basis


def speedup_bound(cost: float) -> float:
    """What removing `cost` of the step gives at most: 1 / (1 - cost)."""
    return min(MOST_PREDICTED, 1 / max(1 - cost, 1 / MOST_PREDICTED))


def _finding(rule: Rule, metrics: dict, context: dict, framework: Optional[FrameworkSite] = None) -> Finding:
    cost, severity, basis = predicted_cost(rule, metrics)
    location = context["locations"].get(rule.location) if rule.location else None
    fix_code = rule.fix_code.render(context).strip() if rule.fix_code else ""
    location, fix_code = _in_framework_terms(rule, location, fix_code, metrics, framework)
    return Finding(
        rule=rule.id, category=rule.category, severity=severity, cost_fraction=cost, title=rule.title,
        message=" ".join(rule.evidence.render(context).split()),
        location=location, fix=rule.fix, fix_code=fix_code, optimizations=rule.optimizations, docs=rule.docs,
        predicted_speedup=speedup_bound(cost) if rule.predicts in ("speedup", "floor") else None, cost_basis=basis,
        share_of="run" if rule.predicts == "run-share" else "step",
        prediction_bound="lower" if rule.predicts == "floor" else "upper",
    )


def _in_framework_terms(rule: Rule, location: Optional[str], fix_code: str, metrics: dict,
                        site: Optional[FrameworkSite]) -> tuple[Optional[str], str]:
    """Under a framework that builds the loop (HF Trainer), a fix is a setting on the user's configuring call,
    and time inside its loop (the .train() line) is the configuring line's to change. Under one that leaves
    the DataLoader and optimizer to the user (Lightning), only fixes that are its own settings are reworded."""
    framework = frameworks.get(site.name) if site else None
    if framework is None or not site.location:
        return location, fix_code
    configured = display_location(site.location)
    wording = frameworks.fix_code(site.name, configured, rule.optimizations, metrics, site.settings)
    own = bool(rule.optimizations) and rule.optimizations[0] in framework.settings
    if not wording or not (framework.builds_loops or own):
        return location, fix_code
    if location and location == display_location(site.entry):
        wording = (f"# the time is inside {framework.title}'s own training loop, entered at {location} and "
                   f"configured at {configured}\n{wording}")
        location = configured
    return location or configured, wording


def findings_for(analysis: Optional[Analysis], rules: list[Rule]) -> list[Finding]:
    """The findings of these rules on an analysis with steps; about one rank of several, they say which."""
    if analysis is None or not analysis.steps:
        return []
    findings = evaluate(rules, analysis)
    if len(analysis.ranks) > 1:
        rank = int(analysis.metrics["rank"])
        findings = [replace(f, message=f"rank {rank}: {f.message}") for f in findings]
    return findings
