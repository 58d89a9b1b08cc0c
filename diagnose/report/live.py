"""The terminal's account of an interleaved comparison (live.json): the ratio and its interval, the gate's
decision, how it was measured and what kept it from deciding."""
from __future__ import annotations

from pathlib import Path

from rich.console import Console

from diagnose.formatting import fmt_ms
from diagnose.model import LiveComparison, Verdict

STYLE = {Verdict.SLOWER: "red", Verdict.FASTER: "green", Verdict.NO_CHANGE: "", Verdict.UNDECIDED: "yellow",
         Verdict.FAILED: "red"}


def print_live(console: Console, c: LiveComparison, written: Path) -> None:
    a, b = c.a, c.b
    console.print(f"Interleaved: A {a.script}{_ref(a.revision)} against B {b.script}: {c.pairs} pairs of windows in "
                  f"{len(c.rounds)} round(s) of fresh processes, {c.spent_s:.0f} s of {c.budget_s:.0f}.",
                  highlight=False)
    for side in (a, b):
        if side.error:
            console.print(f"  {side.error}", style="red", highlight=False, markup=False)
    if c.ratio is not None:
        console.print(f"B's step time is {c.ratio:.3f}x A's [{c.ci[0]:.3f}-{c.ci[1]:.3f}] (99%): {c.verdict}"
                      f"  (A {fmt_ms(a.step_s)}, B {fmt_ms(b.step_s)} a step)", style=STYLE.get(c.verdict, ""),
                      highlight=False)
        summary = f"the {c.trimmed:.0%} trimmed mean of" if c.trimmed else "the mean of"
        console.print(f"  {summary} each round's pairs; a pair's ratio spreads {c.pair_sd:.1%}; fresh processes "
                      f"differed by {c.process_sd:.1%} beyond that", style="dim", highlight=False)
    if c.gate is not None:
        console.print(_gate_line(c), style="red" if c.gate.failed else "yellow" if c.gate.decision == "undecided"
                      else "green", highlight=False)
    for note in c.notes:
        console.print(f"  note: {note}", style="yellow", highlight=False, markup=False)
    console.print(f"Written: {written}", highlight=False)


def _ref(revision) -> str:
    return f" at {revision}" if revision else ""


def _gate_line(c: LiveComparison) -> str:
    allowed = c.gate.allowed_slowdown_pct
    if c.gate.decision == "fail":
        return f"Gate --fail-if-slower {allowed:g}: FAILED: B is slower than A by more than {allowed:g}% (99%)."
    if c.gate.decision == "pass":
        return f"Gate --fail-if-slower {allowed:g}: passed: B is not slower than A by {allowed:g}% or more (99%)."
    reason = ("the budget ran out with the allowance inside the interval: a larger --budget-seconds gives more "
              "pairs" if c.ratio is not None else "nothing was measured")
    return f"Gate --fail-if-slower {allowed:g}: undecided ({reason}); it does not fail the job."
