"""What the experiments cost, in one place: the seconds of one timed run before any has run, and how many runs a
setting, a sweep, the baseline and a combination need. plan.py budgets with it, trials.py runs what it counts
(tests/test_trials.py checks the two agree on a simulated clock) and the scheduler sizes its runs from it."""
from __future__ import annotations

import math

# --- one timed run -------------------------------------------------------------------------------------------
PROCESS_START_S = 2.0  # a fresh Python with torch imported, before the script's first line
STOP_S = 0.5  # the child writes its measurement and exits
STARTUP_UNKNOWN_S = 3.0  # the script's own start-up when the capture saw no first step
STEP_UNKNOWN_S = 0.05  # a step's time when the capture measured none (a typical small script's)
WARMUP_STEPS = 5  # past the first steps' one-off costs: allocator growth, autotuning, lazy initialisation
WARMUP_S = 0.3  # and at least this long: fast steps' caches and clocks settle in time, not in steps
WINDOWS = 3  # timed windows a run has at most (two that agree end it early)
WINDOW_STEPS = 5  # a window spans at least this many of the baseline's steps...
WINDOW_S = (0.5, 3.0)  # ...and this many seconds: long enough to average timer noise, short enough to repeat
# a run's cost with nothing known of the script (the planner estimates it from the capture): a small script's
# process start, start-up, warm-up and windows, with room for a slow import
RUN_UNKNOWN_S = 15.0
# a run's hard limit: four times its estimate (a slow setting may be much slower) plus a start-up's variance,
# never under half a minute (a loaded machine's process start alone can take seconds)
LIMIT_FACTOR, LIMIT_SLACK_S, LIMIT_FLOOR_S = 4.0, 30.0, 30.0

# --- runs to a verdict ---------------------------------------------------------------------------------------
RUNS_FOR_INTERVAL = 2  # a setting's and the baseline's: the fewest that give an interval (one is no spread)
MAX_RUNS = 3  # an undecided setting gets a third run, then its verdict stands
BASELINE_FIRST_RUNS = 2  # the baseline's runs before any setting's: nothing compares without them
VARIANTS_PER_BASELINE = 2  # then one baseline run before every two variant runs (B V V B V V): drift is shared
LEVER_RUNS = 3  # of each memory lever on a run out of memory (round-robin, no baseline to interleave: it failed)
BUDGET_MARGIN = 1.2  # a budget this tool suggests covers its runs with a fifth to spare: runs vary in length


def window_s(step_s: float) -> float:
    """A timed window: WINDOW_STEPS of the baseline's steps, within WINDOW_S."""
    low, high = WINDOW_S
    return min(high, max(low, WINDOW_STEPS * step_s))


def run_estimate_s(startup_s: float | None, step_s: float | None, window: float, extra_warmup: int = 0) -> float:
    """One timed run before any has run: process start, the script's start-up, the warm-up, the windows."""
    step = step_s or STEP_UNKNOWN_S
    startup = STARTUP_UNKNOWN_S if startup_s is None else startup_s
    warmup = max((WARMUP_STEPS + extra_warmup) * step, WARMUP_S)
    return PROCESS_START_S + startup + warmup + WINDOWS * max(window, WINDOW_STEPS * step) + STOP_S


def long_step_plan(step_s: float) -> tuple[int, int]:
    """(warm-up steps, steps a window holds at least) of a timed run whose steps are as long as `step_s`: the
    usual WARMUP_STEPS and WINDOW_STEPS, fewer when steps take seconds (a window of WINDOW_S[1] is long enough to
    average timer noise; a step of seconds is past the allocator's growth after two), so a run takes a minute,
    not five."""
    if step_s * WINDOW_STEPS <= WINDOW_S[1]:
        return WARMUP_STEPS, WINDOW_STEPS
    return 2, max(2, math.ceil(WINDOW_S[1] / step_s))


def long_step_run_s(startup_s: float, step_s: float, epoch_steps: int | None = None, restart_steps: int = 2) -> float:
    """One timed run with long_step_plan's counts: process start, start-up, warm-up, WINDOWS windows. An epoch's
    first `restart_steps` are its start-up, not timed: with epochs of `epoch_steps` the run takes that many more
    (an MLP whose epoch held four steps of seven seconds saw 15 steps where 8 were planned)."""
    warmup, window = long_step_plan(step_s)
    steps = warmup + WINDOWS * window
    if epoch_steps and epoch_steps > restart_steps:
        steps = math.ceil(steps * epoch_steps / (epoch_steps - restart_steps))
    return PROCESS_START_S + startup_s + steps * step_s + STOP_S


def budget_to_ask_s(needed_s: float) -> int:
    """A --budget-seconds to suggest for `needed_s` of runs: BUDGET_MARGIN to spare, in whole minutes."""
    return int(math.ceil(needed_s * BUDGET_MARGIN / 60.0) * 60)


def run_limit_s(expected_s: float, remaining_s: float) -> float:
    """How long a run may take before it is stopped: LIMIT_* above, and no longer than the budget has left."""
    return max(LIMIT_FLOOR_S, min(remaining_s, LIMIT_FACTOR * expected_s + LIMIT_SLACK_S))


def survivors_after(alive: int) -> int:
    """Successive halving: the better half of a round's settings (rounded up) runs again."""
    return math.ceil(alive / 2)


def sweep_done(alive: int, survivor_runs: int) -> bool:
    """A sweep ends with one setting left that has the runs an interval needs."""
    return alive == 1 and survivor_runs >= RUNS_FOR_INTERVAL


def halving_rounds(settings: int) -> list[int]:
    """How many settings run in each round of a sweep of `settings`, when none fails: 5 -> [5, 3, 2] (the last
    two rounds' survivor has its two runs), 4 -> [4, 2]. One setting is a sweep of one that needs two: [1, 1]."""
    rounds = [settings]
    while True:
        alive = survivors_after(rounds[-1])
        if sweep_done(alive, len(rounds)):  # the survivor has run in every round so far
            return rounds
        rounds.append(alive)


def variant_runs(settings: int) -> int:
    """Runs of an optimization's settings to a verdict when its survivor settles on its first interval."""
    return sum(halving_rounds(settings))


def baseline_runs_among(variants: int, since_baseline: int = 0) -> int:
    """Baseline runs interleaved among `variants` runs, `since_baseline` variant runs after the last one."""
    runs = 0
    for _ in range(variants):
        if since_baseline >= VARIANTS_PER_BASELINE:
            runs, since_baseline = runs + 1, 0
        since_baseline += 1
    return runs


def runs_to_decide(settings: int, since_baseline: int = 0) -> int:
    """An optimization's runs with the baseline runs interleaved among them."""
    variants = variant_runs(settings)
    return variants + baseline_runs_among(variants, since_baseline)


def runs_needed(sweep_sizes: list[int]) -> int:
    """Everything, from the baseline's first runs: the optimizations (their numbers of settings) one after
    another, the baseline interleaved throughout."""
    variants = sum(variant_runs(n) for n in sweep_sizes)
    return BASELINE_FIRST_RUNS + variants + baseline_runs_among(variants)
