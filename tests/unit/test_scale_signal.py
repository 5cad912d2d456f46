"""The autoscaling formula, the master's duration meter, the autoscaler's policy, the
readiness rule and the --autoscale option: pure functions, no Redis."""

from __future__ import annotations

from typing import cast

import click
import pytest

from taskq.cli.worker import parse_autoscale
from taskq.worker.autoscale import Autoscaler, share_of
from taskq.worker.durations import DurationMeter
from taskq.worker.health import readiness
from taskq.worker.scaling import Scaler, ScaleSignal, desired_processes


def test_nothing_waits_or_runs_wants_nothing() -> None:
    assert desired_processes(0, 0, 0.1, 10.0) == 0
    assert desired_processes(0, 0, None, 10.0) == 0


def test_running_jobs_keep_their_processes() -> None:
    assert desired_processes(0, 3, 0.1, 10.0) == 3
    assert desired_processes(40, 4, 0.1, 10.0) == 4  # 0.4 s of work: starts within target


def test_backlog_is_spread_to_start_within_the_target() -> None:
    assert desired_processes(1_000, 0, 0.1, 10.0) == 10
    assert desired_processes(1_001, 4, 0.1, 10.0) == 11
    assert desired_processes(1, 0, 0.001, 10.0) == 1


def test_unknown_duration_asks_for_one_process_to_measure_it() -> None:
    assert desired_processes(500, 0, None, 10.0) == 1
    assert desired_processes(500, 2, None, 10.0) == 2


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_meter_divides_busy_time_by_jobs_finished() -> None:
    clock = FakeClock()
    meter = DurationMeter(window_s=60, clock=clock)
    assert meter.recent(0) == (0, 0)
    clock.now = 5.0  # children starting up: nothing ran yet
    for _ in range(11):  # two jobs running for 1 s
        meter.sample(2)
        clock.now += 0.1
    assert meter.recent(20) == (20, 2000)  # 20 jobs of 100 ms


def test_meter_leaves_running_jobs_out_until_they_end() -> None:
    clock = FakeClock()
    meter = DurationMeter(window_s=60, clock=clock)
    meter.recent(0)
    for _ in range(11):
        meter.sample(1)
        clock.now += 0.1
    clock.now -= 0.1
    assert meter.recent(4, in_flight_s=0.2) == (4, 800)  # 4 jobs of 200 ms, one running


def test_meter_forgets_what_is_older_than_its_window() -> None:
    clock = FakeClock()
    meter = DurationMeter(window_s=60, clock=clock)
    meter.recent(0)
    meter.sample(1)
    clock.now = 10.0
    meter.sample(0)
    assert meter.recent(100) == (100, 10_000)
    clock.now = 80.0  # idle since; the first mark is 80 s old, the second 70 s
    meter.sample(0)
    assert meter.recent(100) == (0, 0)


def make_autoscaler(clock: FakeClock) -> Autoscaler:
    scaler = cast(Scaler, None)  # decide() never reads Redis
    return Autoscaler(scaler, low=1, high=4, idle_s=60, clock=clock)


def test_autoscaler_grows_at_once_up_to_its_max() -> None:
    auto = make_autoscaler(FakeClock())
    assert auto.decide(3) == 3
    assert auto.decide(10) == 4


def test_autoscaler_shrinks_only_after_the_idle_window() -> None:
    clock = FakeClock()
    auto = make_autoscaler(clock)
    auto.decide(4)
    assert auto.decide(0) == 4  # the lull starts
    clock.now = 59.0
    assert auto.decide(0) == 4
    clock.now = 60.0
    assert auto.decide(0) == 1  # its min, not 0
    clock.now = 61.0
    assert auto.decide(2) == 2  # and grows again at once


def test_a_busy_moment_restarts_the_idle_window() -> None:
    clock = FakeClock()
    auto = make_autoscaler(clock)
    auto.decide(4)
    auto.decide(0)
    clock.now = 50.0
    auto.decide(4)
    clock.now = 70.0
    assert auto.decide(0) == 4


def signal_of(desired: int, processes: int) -> ScaleSignal:
    return ScaleSignal("q", desired, 0, 0, 0, 0, 0, processes, 1, 0.1, 0.0, 10.0, 60.0)


def test_the_share_leaves_out_what_other_workers_run() -> None:
    assert share_of([signal_of(10, 6)], own_processes=2) == 6  # others run 4
    assert share_of([signal_of(3, 8)], own_processes=2) == 0
    assert share_of([signal_of(5, 1)], own_processes=2) == 5  # record older than a resize


def test_readiness_says_why_not() -> None:
    assert readiness(stopping=False, redis_reachable=True, children=2).ready
    assert readiness(stopping=True, redis_reachable=True, children=2).reason == "shutting down"
    assert not readiness(stopping=False, redis_reachable=False, children=2).ready
    assert not readiness(stopping=False, redis_reachable=True, children=0).ready


@pytest.mark.parametrize(("given", "parsed"), [("8,2", (8, 2)), ("4", (4, 1)), (" 3 , 3 ", (3, 3))])
def test_autoscale_option_reads_max_then_min(given: str, parsed: tuple[int, int]) -> None:
    assert parse_autoscale(given) == parsed


@pytest.mark.parametrize("given", ["2,8", "0,0", "4,0", "a,b", "4,2,1", "-1"])
def test_autoscale_option_refuses_what_cannot_run(given: str) -> None:
    with pytest.raises(click.BadParameter):
        parse_autoscale(given)
