"""Renders a Comparison (compare stage): sentences, the terminal summary and compare.html. Only words and
layout here; every number was computed by the compare stage."""
from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from rich.console import Console

from diagnose import __version__
from diagnose.compare.interval import RUN_NOISE_FLOOR_SD
from diagnose.formatting import fmt_ms
from diagnose.model import AmountChange, Comparison, GateResult, Verdict
from diagnose.record.run_record import RunRecord
from diagnose.report.charts import LABELS, breakdown_pair_chart
from diagnose.report.run_cost import compare_sentence

FINDING_WORDS = {"resolved": "resolved", "new": "new", "unchanged": "still there"}
STATUS_STYLE = {Verdict.FASTER: "green", "removed": "green", Verdict.SLOWER: "red", "added": "red", "resolved": "green",
                "new": "red", "unchanged": "dim"}


def _factor(ratio: float, unit: str = "") -> str:
    """A step-time ratio as a user says it: '8.31x faster', '12.0% slower'; unit "x" or "%" forces one."""
    unit = unit or ("x" if max(ratio, 1 / ratio) >= 1.5 else "%")
    if unit == "x":
        return f"{1 / ratio:.2f}x faster" if ratio <= 1 else f"{ratio:.2f}x slower"
    return f"{1 / ratio - 1:.1%} faster" if ratio <= 1 else f"{ratio - 1:.1%} slower"


def step_sentence(c: Comparison) -> str:
    step = c.step
    unit = "x" if max(step.ratio, 1 / step.ratio) >= 1.5 else "%"
    span = f"{step.confidence:.0%} interval: {_factor(step.ci[0], unit)} to {_factor(step.ci[1], unit)}"
    times = f"step {fmt_ms(c.a.step_s)} -> {fmt_ms(c.b.step_s)}"
    if step.verdict == Verdict.NO_CHANGE:
        said = "as fast as A" if abs(step.ratio - 1) < 5e-4 else f"{_factor(step.ratio, unit)} than A"
        return f"No change in step time beyond the noise: B is {said} ({times}; {span})."
    return f"B is {_factor(step.ratio, unit)} than A ({times}; {span})."


def basis_sentence(c: Comparison) -> str:
    step = c.step
    what = ("step times timed without the profiler, before each run's profiled window" if step.basis == "unprofiled"
            else "profiled step times (the profiler slows steps; both sides alike)")
    noise = {"measured": f"measured {step.run_noise_sd:.1%} by the runs' repeated baseline runs",
             "blocks": f"measured {step.run_noise_sd:.1%} between blocks of the runs' timed windows",
             "floor": f"{step.run_noise_sd:.1%}: the blocks of the runs' timed windows measured less, and what moves "
                      f"a whole run does not all show inside one, so never under 3%",
             "stated": f"{step.run_noise_sd:.1%} as stated by --run-noise",
             "assumed": f"{step.run_noise_sd:.0%}, the default measured on real runs (benchmarks/run_noise.py): "
                        f"neither run measured its own"}[step.run_noise_source]
    return (f"Compared: {what}. A and B are separate processes, possibly hours apart: the interval counts each "
            f"side's spread between steps and a run-to-run variation per run ({noise}).")


def gate_sentence(gate: Optional[GateResult]) -> str:
    if gate is None:
        return ""
    low = gate.slowdown_low_pct
    beyond = f"at least {low:.1f}% slower" if low > 0 else "not slower beyond the noise"
    how = ("only --run-noise, measured on a quiet runner, goes under the 3% diagnose assumes at least"
           if gate.needs_run_noise_sd < RUN_NOISE_FLOOR_SD else
           "more steps timed (--steps), repeated runs (the experiments), or --run-noise measured on a quiet runner")
    reach = (f"With this noise ({gate.run_noise_sd:.1%} per run), B fails once it measures more than "
             f"{gate.fails_above_pct:.0f}% slower; to fail a run at twice the {gate.allowed_slowdown_pct:g}% allowed, "
             f"the runs must vary by under {gate.needs_run_noise_sd:.1%} per run: {how}.")
    if gate.failed:
        return f"Gate failed: B is {beyond}, more than the {gate.allowed_slowdown_pct:g}% allowed. {reach}"
    return f"Gate passed: B is {beyond} (allowed: {gate.allowed_slowdown_pct:g}% slower). {reach}"


def change_text(row: AmountChange) -> str:
    return f"{fmt_ms(row.a)} -> {fmt_ms(row.b)} ({'+' if row.b >= row.a else '-'}{fmt_ms(abs(row.b - row.a))})"


def print_comparison(console: Console, c: Comparison, html: Optional[Path]) -> None:
    def say(text: str, style: str = "") -> None:
        console.print(text, style=style, soft_wrap=True, markup=False, highlight=False)

    say(f"A: {c.a.path}", "dim")
    say(f"B: {c.b.path}", "dim")
    say(step_sentence(c), "bold " + STATUS_STYLE.get(c.step.verdict, ""))
    say(f"  {basis_sentence(c)}", "dim")
    if c.run_cost is not None:
        say(f"  {compare_sentence(c.run_cost)}")
    buckets = " · ".join(f"{LABELS[r.name]} {change_text(r)}" for r in c.buckets)
    say(f"  by bucket (profiled, per step): {buckets}")
    for status in ("resolved", "new", "unchanged"):
        rules = [f"{f.rule} ({f.title})" for f in c.findings if f.status == status]
        if rules:
            say(f"  findings {FINDING_WORDS[status]}: {'; '.join(rules)}", STATUS_STYLE[status])
    for label, rows in (("CPU ops (host self time)", c.ops), ("GPU kernels", c.kernels)):
        if rows:
            shown = "; ".join(f"{_short(r.name)} {change_text(r)} {r.status}" for r in rows[:3])
            say(f"  {label} that moved most: {shown}")
    if c.environment_changes:
        say("  what differs: " + "; ".join(f"{what} {a} -> {b}" for what, a, b in c.environment_changes))
    for note in c.notes:
        say(f"  note: {note}", "dim")
    if c.gate is not None:
        say(gate_sentence(c.gate), "bold red" if c.gate.failed else "green")
    if html:
        say(f"Compare report: {html}")


def _short(name: str, width: int = 60) -> str:
    return name if len(name) <= width else name[:width - 1] + "…"


@dataclass(frozen=True)
class CompareView:
    comparison: Comparison
    title: str
    step_sentence: str
    basis_sentence: str
    gate_sentence: str
    chart: str
    generated: str
    version: str
    run_cost_sentence: str = ""  # the same run's hours, kWh and money on both sides


def build_compare_view(c: Comparison) -> CompareView:
    a_ms = {r.name: r.a * 1000 for r in c.buckets}
    b_ms = {r.name: r.b * 1000 for r in c.buckets}
    return CompareView(comparison=c, title=f"diagnose compare: {Path(c.a.path).name} vs {Path(c.b.path).name}",
                       step_sentence=step_sentence(c), basis_sentence=basis_sentence(c),
                       gate_sentence=gate_sentence(c.gate), chart=breakdown_pair_chart(a_ms, b_ms),
                       generated=dt.datetime.now().strftime("%Y-%m-%d %H:%M:%S"), version=__version__,
                       run_cost_sentence=compare_sentence(c.run_cost))


def write_compare_html(out_dir: Path, c: Comparison, templates_dir: Optional[str] = None) -> Path:
    from diagnose.report.render import template_environment

    html = template_environment(templates_dir).get_template("compare.html.j2").render(
        view=build_compare_view(c), labels=LABELS)
    return RunRecord(out_dir).save_compare_report(html)
