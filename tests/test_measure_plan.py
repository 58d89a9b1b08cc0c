"""A timed run's plan on its own (diagnose/experiments/measure.py adapted_plan, measure_bursts): how long steps
shorten its warm-up and windows, and how its windows close. Pure functions of the plan: no process, no clock."""
from __future__ import annotations

from diagnose.experiments.measure import adapted_plan, measure_bursts
from diagnose.model import MeasurePlan

PLAN = MeasurePlan(warmup_steps=5, warmup_s=0.3, window_s=1.0, min_window_steps=5, max_window_steps=40)


def test_short_steps_keep_the_plan():
    assert adapted_plan(PLAN, 0.05) == PLAN


def test_steps_of_seconds_warm_up_two_and_fill_a_window_of_three_seconds():
    plan = adapted_plan(PLAN, 1.5)
    assert (plan.warmup_steps, plan.min_window_steps) == (2, 2)
    assert adapted_plan(PLAN, 0.7).min_window_steps == 5  # 5 steps of 0.7 s: 3.5 s, past the window's 3 s
    # with loader workers a window still holds a whole burst
    bursty = MeasurePlan(min_window_steps=8, burst_steps=4)
    assert adapted_plan(bursty, 10.0).min_window_steps == 4


def test_windows_close_at_whole_bursts_after_their_time_or_their_most_steps():
    bursts = measure_bursts(MeasurePlan(window_s=1.0, min_window_steps=8, max_window_steps=40, burst_steps=4))
    assert not bursts.closes(8, 0.9) and bursts.closes(8, 1.0) and not bursts.closes(10, 2.0)
    assert bursts.closes(40, 0.0)
    # cut short by an epoch's start: whole bursts, half a window at least
    assert bursts.keeps_cut(4) and not bursts.keeps_cut(6) and not measure_bursts(MeasurePlan()).keeps_cut(1)
