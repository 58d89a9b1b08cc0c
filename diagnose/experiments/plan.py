"""Planning the experiment budget: which optimizations to try first, what one timed run costs, what the budget
will cover, and the command that tries what it did not."""
from __future__ import annotations

import math
import shlex
from dataclasses import dataclass
from typing import Optional

from diagnose.experiments import cost
from diagnose.experiments.scheduler import Arm
from diagnose.model import Analysis, Capture, Finding, stated_step_s

MIN_RUNS = cost.runs_needed([1])  # two of the baseline and two of one setting: the fewest that give an interval
PRIMARY_WEIGHT = 0.8  # a finding's later optimizations are less likely to be its fix than its first


@dataclass
class Candidate:
    optimization: str
    arms: list[Arm]
    gain: float  # the share of the step it can win back, from the findings that recommend it

    @property
    def sweep(self) -> bool:
        return len(self.arms) > 1

    def min_runs(self) -> int:
        """Variant runs to a verdict: two for one setting; a sweep screens each setting once, then halves."""
        return cost.variant_runs(len(self.arms))


_COMBINATION = Candidate("combined", [Arm("combined", {}, ())], 0.0)


def expected_gains(findings: list[Finding]) -> dict[str, float]:
    """Each optimization's promise: the largest cost of a finding that recommends it (workers recover at most the
    data wait, tensor cores the fp32 GEMM loss...), less for a finding's second and later fixes."""
    gains: dict[str, float] = {}
    for finding in findings:
        for rank, optimization in enumerate(finding.optimizations):
            gain = finding.cost_fraction * PRIMARY_WEIGHT ** rank
            gains[optimization] = max(gains.get(optimization, 0.0), gain)
    return gains


def order_candidates(candidates: list[Candidate]) -> list[Candidate]:
    """Most promising first; a sweep's extra runs weigh against it only between equals."""
    return sorted(candidates, key=lambda c: (-round(c.gain, 2), c.min_runs()))


def run_estimate_s(capture: Capture, analysis: Optional[Analysis], window_s: float) -> float:
    """One timed run before any has run, from the capture's start-up and step time."""
    times = analysis.step_time_s if analysis is not None else {}
    startup = capture.boundaries_s[0] if capture.boundaries_s else None
    return cost.run_estimate_s(startup, stated_step_s(times), window_s)


def runs_needed(candidates: list[Candidate]) -> int:
    """The baseline's first runs, the candidates' runs, and the baseline's interleaved among them."""
    return cost.runs_needed([len(c.arms) for c in candidates])


def covered(candidates: list[Candidate], budget_s: float, run_s: float, combine: bool = False) -> list[Candidate]:
    """The candidates, in order, whose runs fit in the budget after those before them. A sweep that does not fit
    whole keeps its strongest settings (listed last: more workers, a larger batch). With `combine`, two runs of the
    winners together are kept in reserve once two changes could be combined."""
    affordable = int(budget_s // max(run_s, 1e-3))
    chosen: list[Candidate] = []
    for candidate in candidates:
        for trimmed in _trimmed(candidate):
            reserve = [_COMBINATION] if combine or chosen else []
            if runs_needed(chosen + [trimmed] + reserve) <= affordable:
                chosen.append(trimmed)
                break
    return chosen


def _trimmed(candidate: Candidate):
    """The candidate, then its sweep with fewer settings, strongest kept, down to one."""
    for keep in range(len(candidate.arms), 0, -1):
        yield candidate if keep == len(candidate.arms) else Candidate(candidate.optimization,
                                                                       candidate.arms[-keep:], candidate.gain)


def fewest_runs(combine: bool) -> int:
    """The fewest timed runs `covered` chooses anything with: two of the baseline and two of one setting, and with
    `combine` the runs kept in reserve for the combination (two of it, one more of the baseline between)."""
    return runs_needed([Candidate("one", [Arm("one", {}, ())], 0.0)] + ([_COMBINATION] if combine else []))


def plan_sentence(budget_s: float, run_s: float, chosen: list[Candidate], all_: list[Candidate],
                  combine: bool = False) -> str:
    """What the planner did, in its own terms: `combine` as given to `covered` (the combination's reserve counts)."""
    affordable = int(budget_s // max(run_s, 1e-3))
    if not chosen:
        need = fewest_runs(combine)
        enough = _round_up(need * run_s * cost.BUDGET_MARGIN)
        parts = "two of the baseline, two of a setting" if not combine else (
            f"two of a setting, two of it combined with the changes that ride along, {need - 4} of the baseline "
            "interleaved")
        return (f"Experiment budget {budget_s:.0f} s: a timed run of this script takes about {run_s:.0f} s, so it "
                f"fits {affordable} run(s); a verdict needs at least {need} ({parts}). Nothing was run: give "
                f"--budget-seconds {enough} or more.")
    sizes = {c.optimization: len(c.arms) for c in all_}
    names = ", ".join(_described(c, sizes[c.optimization]) for c in chosen)
    left = [c.optimization for c in all_ if c.optimization not in {k.optimization for k in chosen}]
    rest = f"; not covered: {', '.join(left)}" if left else ""
    return (f"Experiment budget {budget_s:.0f} s: about {affordable} timed runs of ~{run_s:.0f} s; enough for "
            f"verdicts on {names}{rest}.")


def _described(candidate: Candidate, of: int) -> str:
    if of == 1:
        return candidate.optimization
    count = f"{len(candidate.arms)} of {of}" if len(candidate.arms) < of else str(of)
    return f"{candidate.optimization} ({count} settings)"


def rest_command(capture: Capture, untried: list[Candidate], run_s: float) -> str:
    """The command that gives the optimizations left without a verdict a budget of their own."""
    if not untried:
        return ""
    seconds = _round_up(runs_needed(untried) * run_s * cost.BUDGET_MARGIN)
    ids = ",".join(c.optimization for c in untried)
    args = " ".join(shlex.quote(a) for a in capture.script_args)
    separator = " --" if args else ""
    return (f"diagnose run --experiments {ids} --budget-seconds {seconds} {shlex.quote(capture.script)}"
            f"{separator}{' ' + args if args else ''}")


def _round_up(seconds: float, step: int = 10) -> int:
    return int(math.ceil(seconds / step) * step)

