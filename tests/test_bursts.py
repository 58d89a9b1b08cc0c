"""The one rule that closes a timing of steps in whole loader bursts (diagnose/capture/bursts.py), which the
capture's plain timing and the experiments' timed runs share. Pure arithmetic: no clock, no process."""
from __future__ import annotations

from diagnose.capture.bursts import Bursts


def test_a_timing_closes_at_whole_bursts_once_it_has_its_steps_and_time():
    bursts = Bursts(size=4, least=8, most=40, seconds=1.0)
    assert not bursts.closes(8, 0.5)  # long enough in steps, not in time
    assert not bursts.closes(9, 2.0)  # in time, inside a burst
    assert bursts.closes(12, 2.0)
    assert not bursts.closes(4, 2.0)  # fewer than `least`
    assert bursts.closes(40, 0.0)  # `most` closes whatever the time


def test_without_seconds_a_timing_closes_on_its_step_count_alone():
    bursts = Bursts(size=1, least=3, most=5)
    assert not bursts.closes(4, 1e9) and bursts.closes(5, 0.0)


def test_a_timing_cut_short_keeps_whole_bursts_only():
    bursts = Bursts(size=4, least_cut=4)
    assert bursts.whole(11) == 8 and bursts.rounded_up(9) == 12
    assert bursts.keeps_cut(8) and not bursts.keeps_cut(6) and not Bursts(size=4, least_cut=12).keeps_cut(8)


def test_no_workers_is_a_burst_of_one():
    assert Bursts(size=0).size == 1 and Bursts(size=0).is_whole(7)
