"""`diagnose rules`: the rules and their fixes, the metrics they use, or their own test cases run."""
from __future__ import annotations

from pathlib import Path

from rich.console import Console

from diagnose import rules as rule_engine
from diagnose.optimizations import REGISTRY


def load_rules(rules_dirs) -> list[rule_engine.Rule]:
    """The bundled rules and those in rules_dirs, checked against the optimizations' registry."""
    return rule_engine.load_rules((Path(d) for d in rules_dirs), optimization_ids=REGISTRY)


def rules_listing(rules_dirs, show_metrics: bool, check: bool) -> int:
    from diagnose.analysis.metrics import METRICS

    console = Console()
    if show_metrics:
        for name, text in METRICS.items():
            console.print(f"[bold]{name}[/]  {text}", highlight=False)
        return 0
    rules = load_rules(rules_dirs)
    if check:
        for rule in rules:
            # with its templates parsed: a syntax error names the file
            rule_engine.load_rule(rule.path, optimization_ids=REGISTRY)
        failures = [(r, c) for r in rules for c in r.cases if r.fires(c.metrics) != c.fires]
        for rule, case in failures:
            console.print(f"[red]FAIL[/] {rule.id} ({rule.path}): expected fires={case.fires} for {case.metrics}")
        console.print(f"{sum(len(r.cases) for r in rules) - len(failures)} passed, {len(failures)} failed")
        return 1 if failures else 0
    import textwrap

    def indented(text: str) -> str:  # wrapped lines keep the indent
        return textwrap.fill(" ".join(text.split()), width=max(console.width, 40), initial_indent="  ",
                             subsequent_indent="  ")

    for rule in sorted(rules, key=lambda r: (r.category, r.id)):
        console.print(f"[bold]{rule.id}[/]  [dim]{rule.category}[/]  {rule.title}", highlight=False)
        if rule.explanation:
            console.print(indented(rule.explanation), highlight=False, markup=False, soft_wrap=True)
        console.print(indented(f"when: {rule.condition.source}"), style="dim", highlight=False, markup=False,
                      soft_wrap=True)
        if rule.optimizations:
            console.print(indented(f"fixes: {', '.join(rule.optimizations)}"), style="dim", highlight=False,
                          markup=False, soft_wrap=True)
        console.print()
    return 0
