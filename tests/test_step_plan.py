"""The capture's step plan (diagnose/capture/step_plan.py) on its own: how many steps warm up, are timed without
the profiler and are profiled, and how many fewer when steps are long. Pure arithmetic: no process, no clock."""
from __future__ import annotations

from diagnose.capture.step_plan import (
    MIN_PROFILED,
    MIN_TIMED,
    Feed,
    Phase,
    StepPlan,
    fit_to_time,
    fits,
    options_that_fit,
    plan_steps,
    room_steps,
    steps_that_fit,
    timed_length,
    timed_target,
)


def test_the_plan_times_as_many_steps_as_it_profiles_three_at_least():
    assert plan_steps(3, 8) == StepPlan(warmup=3, timed=8, profiled=8)
    assert plan_steps(3, 1).timed == MIN_TIMED


def test_planned_steps_count_the_loaders_backlog_and_whole_bursts():
    assert plan_steps(3, 8).planned_steps(Feed()) == 3 + 8 + 8
    # 8 workers, 2 batches prefetched each: 16 backlog steps, then 8 timed rounded up to two bursts of 8
    feed = Feed(workers=8, prefetch_factor=2)
    assert (feed.burst, feed.backlog) == (8, 16) and timed_target(8, feed.burst) == 16
    assert plan_steps(3, 8).planned_steps(feed) == 3 + 16 + 16 + 8
    # without warm-up the first step is instrumented: it is not timed
    assert timed_length(8, 0, Feed()) == 9 and timed_length(0, 0, Feed()) == 0


def test_a_plan_that_fits_is_kept():
    assert fit_to_time(plan_steps(3, 8), Feed(), step=1, room=100) is None


def test_long_steps_give_profiled_steps_first_then_timed_then_warm_up():
    plan = plan_steps(5, 8)
    # room for 10 steps at step 1: 5 profiled (at twice a plain step's cost), none left to time
    fitted = fit_to_time(plan, Feed(), step=1, room=10)
    assert fitted == StepPlan(warmup=1, timed=0, profiled=5) and fits(fitted, 1, 10)
    # room for 20: all 8 profiled (16), MIN_TIMED timed of the 4 left, and the last step warms up
    assert fit_to_time(plan, Feed(), step=1, room=20) == StepPlan(warmup=2, timed=MIN_TIMED, profiled=8)
    # no room: MIN_PROFILED profiled steps still, and the plan says it does not fit
    tight = fit_to_time(plan, Feed(), step=1, room=1)
    assert tight.profiled == MIN_PROFILED and not fits(tight, 1, 1)


def test_room_and_the_options_that_would_fit():
    assert room_steps(max_seconds=100, measured_s=20, step_s=4) == 16
    assert options_that_fit(step_s=4.0, startup_s=3.0) == "--warmup 1 --steps 2 --max-seconds 50"


def test_the_steps_that_fit_a_script_that_ended_early():
    # 7 boundaries: a warm-up step, 3 timed, 2 profiled and the boundary that ends the last
    assert steps_that_fit(7, Feed()) == 2 and steps_that_fit(3, Feed()) == 0


def test_the_phases_are_the_progress_lines_words():
    assert [p.value for p in Phase] == ["warm-up", "timing", "profiling", "stopping"]
