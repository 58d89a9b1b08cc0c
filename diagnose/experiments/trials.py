"""Getting verdicts: runs interleaved with the baseline's (B V V B V V ...), each setting's interval from the
noise pooled over all runs so far, sequential stops (an arm stops once its interval excludes 1.0 or rules out
a worthwhile gain), and sweeps by successive halving (every setting once, the better half again, ...)."""
from __future__ import annotations

from typing import Optional

from diagnose.experiments import cost
from diagnose.experiments.plan import Candidate
from diagnose.experiments.scheduler import UNIQUE_SAMPLES, Arm, Scheduler
from diagnose.model import Verdict
from diagnose.optimizations import REGISTRY
from diagnose.verdict.stats import Comparison, Noise, compare, geometric_mean, pooled_noise

WORTHWHILE = 1.05  # an interval whose top is below this has ruled out any gain worth a change


def metric_of(arm: Arm) -> str:
    """unique samples/s when an IterableDataset feeds training (what a stream delivers is new samples, and a
    worker replaying it delivers none); samples/s for settings that change the batch (and a combination holding
    one); else steps/s."""
    if arm.unique_data:
        return UNIQUE_SAMPLES
    ids = [c.id for c in arm.changes] if arm.optimization == "combined" else [arm.optimization]
    return "samples/s" if any(REGISTRY[i].metric == "samples/s" for i in ids if i in REGISTRY) else "steps/s"


class Trials:
    def __init__(self, scheduler: Scheduler, baseline: Arm):
        self.scheduler, self.baseline = scheduler, baseline
        self.arms: list[Arm] = []
        self.since_baseline = cost.VARIANTS_PER_BASELINE  # the first variant run follows a baseline run

    def start(self) -> bool:
        """The baseline's first runs; False when none measured (nothing can be compared)."""
        for _ in range(cost.BASELINE_FIRST_RUNS):
            self.scheduler.run(self.baseline)
        self.since_baseline = 0
        return bool(self.baseline.ok_runs())

    def run(self, arm: Arm) -> bool:
        if arm not in self.arms:
            self.arms.append(arm)
        if self.since_baseline >= cost.VARIANTS_PER_BASELINE and self.scheduler.can_run(self.baseline):
            self.scheduler.run(self.baseline)
            self.since_baseline = 0
        if self.scheduler.run(arm) is None:
            return False
        self.since_baseline += 1
        return True

    def noise(self) -> Optional[Noise]:
        groups = [self.baseline.throughputs("steps/s")] + [a.throughputs(metric_of(a)) for a in self.arms]
        return pooled_noise(groups)

    def comparison(self, arm: Arm) -> Optional[Comparison]:
        metric = metric_of(arm)
        base, mine = self.baseline.throughputs(metric), arm.throughputs(metric)
        if len(base) < 2 or len(mine) < 2:
            return None
        return compare(base, mine, self.noise())

    def settled(self, arm: Arm) -> bool:
        result = self.comparison(arm)
        # an undecided interval (too wide to tell a 2x gain from a 2x loss) is no more settled than a no-change one
        return result is not None and (result.verdict in (Verdict.FASTER, Verdict.SLOWER) or result.ci[1] < WORTHWHILE)

    def runs_to_decide(self, candidate: Candidate) -> int:
        """The runs `decide` makes for the candidate when its survivor settles on its first interval."""
        return cost.runs_to_decide(len(candidate.arms), self.since_baseline)

    def decide_in_budget(self, candidates: list[Candidate], keep_for_combination: bool = False,
                         riders: bool = False) -> None:
        """Each candidate in turn whose runs fit in what the budget has left; with `keep_for_combination`, less
        the runs the winners together will need once there is something to combine (`riders`: a change that
        joins a winner, so one winner is enough)."""
        for candidate in candidates:
            runs = self.runs_to_decide(candidate)
            reserve = self._combination_reserve_runs(riders) if keep_for_combination else 0
            needed_s = (runs * self.scheduler.estimate_s(candidate.arms[0])
                        + reserve * self.scheduler.estimate_s(self.baseline))
            if self.scheduler.remaining_s() >= needed_s:
                self.decide(candidate)

    def _combination_reserve_runs(self, riders: bool) -> int:
        winners = sum(1 for arm in self.arms if (c := self.comparison(arm)) is not None and c.verdict == Verdict.FASTER)
        if winners + riders < 2 or not winners:
            return 0
        return cost.runs_to_decide(1, self.since_baseline)

    def decide(self, candidate: Candidate) -> None:
        survivor = self._halve(candidate.arms) if candidate.sweep else candidate.arms[0]
        while len(survivor.runs) < cost.MAX_RUNS and not self.settled(survivor):
            if len(survivor.ok_runs()) < len(survivor.runs) or not self.run(survivor):
                break  # a run that failed is not retried into a verdict; or the budget ran out

    def _halve(self, arms: list[Arm]) -> Arm:
        alive, round_ = list(arms), 0
        while True:
            for arm in alive:
                if len(arm.runs) <= round_ and not self.run(arm):
                    return self._best(alive)
            alive = [a for a in alive if a.ok_runs()] or alive[:1]  # a crashed setting is not run again
            if len(alive) == 1:  # (a failed run is its own reason, no drop reason needed)
                return alive[0]
            ranked = sorted(alive, key=self._score, reverse=True)
            keep = ranked[:cost.survivors_after(len(ranked))]
            for arm in ranked[len(keep):]:
                arm.dropped = self._drop_reason(arm, keep[0])
            alive, round_ = keep, round_ + 1
            if cost.sweep_done(len(alive), len(alive[0].runs)):
                return alive[0]

    def _best(self, arms: list[Arm]) -> Arm:
        return max(arms, key=self._score)

    def _score(self, arm: Arm) -> float:
        return geometric_mean(arm.throughputs(metric_of(arm)))

    def _drop_reason(self, arm: Arm, best: Arm) -> str:
        base_mean = geometric_mean(self.baseline.throughputs(metric_of(arm)))
        if not base_mean or not self._score(arm):
            return f"dropped from the sweep: {best.label} did better"
        return (f"dropped from the sweep after {len(arm.runs)} run(s) at {self._score(arm) / base_mean:.2f}x the "
                f"baseline, behind {best.label} at {self._score(best) / base_mean:.2f}x: no interval claimed")
