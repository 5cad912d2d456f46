"""The autoscaling formula and the master's duration meter: pure functions, no Redis."""

from __future__ import annotations

from taskq.ops.scale import desired_processes
from taskq.worker.durations import DurationMeter


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
    for _ in range(10):  # two jobs running for 1 s
        clock.now += 0.1
        meter.sample(2)
    assert meter.recent(20) == (20, 2000)  # 20 jobs of 100 ms


def test_meter_forgets_what_is_older_than_its_window() -> None:
    clock = FakeClock()
    meter = DurationMeter(window_s=60, clock=clock)
    meter.recent(0)
    clock.now = 10.0
    meter.sample(1)
    assert meter.recent(100) == (100, 10_000)
    clock.now = 80.0  # idle since; the first mark is 80 s old, the second 70 s
    meter.sample(0)
    assert meter.recent(100) == (0, 0)
