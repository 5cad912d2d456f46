"""The autoscaling formula, the master's per-task duration meter, the record's task map,
the autoscaler's policy, the readiness rule and the --autoscale option: pure functions, no
Redis."""

from __future__ import annotations

from typing import cast

import click
import pytest

from taskq.cli.worker import parse_autoscale
from taskq.worker.autoscale import Autoscaler, share_of
from taskq.worker.durations import CARRIED_TASKS, OTHER, DurationMeter, TaskTime, fold
from taskq.worker.health import readiness
from taskq.worker.outcome import JobCounts
from taskq.worker.record import WorkerRecord, task_times
from taskq.worker.scaling import (
    Scaler,
    ScaleSignal,
    backlog_work_s,
    desired_processes,
    task_durations,
)
from taskq.worker.slotview import Running, SlotView


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


CHILD = (0, 100)


def slot(*tasks: tuple[int, str], finished: int = 0) -> SlotView:
    """A child's slot running jobs ``(seq, task)``, having finished ``finished`` jobs."""
    running = tuple(
        Running(i, seq, 0.0, 0.0, 0, 0.0, "1-0", t, "j") for i, (seq, t) in enumerate(tasks)
    )
    return SlotView(100, finished, 0, 0, 0, running=running)


def test_meter_divides_busy_time_by_jobs_finished() -> None:
    clock = FakeClock()
    meter = DurationMeter(window_s=60, clock=clock)
    assert meter.recent() == (0, 0, {})
    clock.now = 5.0  # children starting up: nothing ran yet
    meter.sample([(CHILD, slot())])
    for n in range(10):  # 10 jobs of 100 ms, each seen by one tick
        clock.now += 0.1
        meter.sample([(CHILD, slot((n + 1, "a"), finished=n))])
    clock.now += 0.1
    meter.sample([(CHILD, slot(finished=10))])
    assert meter.recent() == (10, 1000, {"a": TaskTime(10, 1000)})


def test_meter_leaves_running_jobs_out_until_they_end() -> None:
    clock = FakeClock()
    meter = DurationMeter(window_s=60, clock=clock)
    meter.sample([(CHILD, slot((1, "a")))])
    for _ in range(3):
        clock.now += 0.1
        meter.sample([(CHILD, slot((1, "a")))])
    assert meter.recent() == (0, 0, {})  # running for 300 ms: not a finished job yet
    clock.now += 0.1
    meter.sample([(CHILD, slot((2, "b"), finished=1))])
    assert meter.recent() == (1, 400, {"a": TaskTime(1, 400)})


def test_meter_counts_jobs_shorter_than_a_tick_from_the_counter() -> None:
    # given: a child running 10 ms jobs of "short", one seen by each tick, 9 unseen between
    clock = FakeClock()
    meter = DurationMeter(window_s=60, clock=clock)
    meter.sample([(CHILD, slot((1, "short")))])
    for n in range(1, 11):
        clock.now += 0.1
        meter.sample([(CHILD, slot((10 * n + 1, "short"), finished=10 * n))])
    # then: 100 jobs and 1 s: the mean is right though each tick saw only one of ten
    recent = meter.recent()
    assert recent.tasks == {"short": TaskTime(100, 1000)}


def test_meter_gives_unseen_jobs_to_the_short_task_of_a_mix() -> None:
    # given: a child alternating a 300 ms "long" job and a "short" one, mostly unseen
    clock = FakeClock()
    meter = DurationMeter(window_s=60, clock=clock)
    done, seq = 0, 0
    for n in range(10):
        seq += 1
        for _ in range(3):
            meter.sample([(CHILD, slot((seq, "long"), finished=done))])
            clock.now += 0.1
        done += 2 if n else 1  # the long one, and a short one no sample saw
        seq += 1
        shown = (seq, "short") if n == 0 else None  # the first short one is seen
        meter.sample([(CHILD, slot(*[shown] if shown else [], finished=done))])
        clock.now += 0.1 if shown else 0.0
        done += 1 if shown else 0
    meter.sample([(CHILD, slot(finished=done))])
    # then: long jobs keep their 300 ms; the unseen ones count for "short", not "long"
    tasks = meter.recent().tasks
    assert tasks["long"] == TaskTime(10, 3000)
    assert tasks["short"].jobs == 10


def test_meter_forgets_what_is_older_than_its_window() -> None:
    clock = FakeClock()
    meter = DurationMeter(window_s=60, clock=clock)
    meter.recent()
    meter.sample([(CHILD, slot((1, "a")))])
    clock.now = 10.0
    meter.sample([(CHILD, slot(finished=1))])
    assert meter.recent() == (1, 10_000, {"a": TaskTime(1, 10_000)})
    clock.now = 80.0  # idle since; the first mark is 80 s old, the second 70 s
    meter.sample([(CHILD, slot(finished=1))])
    assert meter.recent() == (0, 0, {})


def test_a_record_carries_the_busiest_tasks_and_folds_the_rest() -> None:
    tasks = {f"t{i}": TaskTime(1, i) for i in range(40)}
    folded = fold(tasks)
    assert len(folded) == CARRIED_TASKS + 1
    assert folded[OTHER] == TaskTime(8, sum(range(8)))
    assert "t39" in folded and "t7" not in folded


def test_the_backlog_is_weighed_by_each_tasks_duration() -> None:
    # given: the last minutes were mostly a 10 ms task (10,000 jobs) and a few of a 1 s one
    recent = {"short": TaskTime(10_000, 100_000), "long": TaskTime(10, 10_000)}
    per_task = task_durations([recent])
    fleet_s = 110.0 / 10_010  # ~11 ms: the mean of the mix that ran
    # when: 1,000 short and 100 long jobs wait
    work_s = backlog_work_s({"short": 1_000, "long": 100}, 0, per_task, fleet_s)
    # then: 10 s + 100 s of work, where the fleet's mean says 12 s
    assert work_s == pytest.approx(110.0)
    assert desired_processes(1_100, 0, work_s / 1_100, 10.0) == 11
    assert desired_processes(1_100, 0, fleet_s, 10.0) == 2
    # a task never measured, and jobs outside the sample, take the fleet's mean
    assert backlog_work_s({"new": 10}, 5, per_task, 2.0) == pytest.approx(30.0)
    assert backlog_work_s({"short": 10}, 0, per_task, None) is None


def test_the_mix_of_several_workers_adds_up_and_other_is_no_task() -> None:
    per_task = task_durations(
        [{"a": TaskTime(1, 100), OTHER: TaskTime(5, 5)}, {"a": TaskTime(3, 700)}]
    )
    assert per_task == {"a": pytest.approx(0.2)}


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


def test_a_record_carries_its_task_map_and_reads_it_back() -> None:
    tasks = {"a": TaskTime(3, 300), OTHER: TaskTime(1, 5)}
    fields = {k: str(v) for k, v in record_with(tasks).to_fields().items()}
    assert fields["recent_tasks"] == '{"a":[3,300],"(other)":[1,5]}'
    assert WorkerRecord.from_fields(fields).recent_tasks == tasks


@pytest.mark.parametrize(
    "raw",
    [
        "[1,2]",
        "not json",
        '"a"',
        "[" * 5_000 + "]" * 5_000,
        '{"a": "3,300"}',
        '{"a": [3]}',
        '{"a": [true, 300]}',
        '{"a": [3.5, 300]}',
        '{"a": [-1, 300]}',
        '{"a": [3, -300]}',
        '{"a": [3, 10000000000000000]}',
        '{"a": [3, 300, 1]}',
        '{"a": null}',
        '{"%s": [3, 300]}' % ("x" * 500),
        '{"b": [1, 1]' + ', "b": [1, 1]' * 5_000 + "}",
    ],
)
def test_a_hostile_task_map_reads_as_empty(raw: str) -> None:
    record = WorkerRecord.from_fields({"id": "w", "recent_tasks": raw, "recent_jobs": "x"})
    assert record.recent_tasks in ({}, {"b": TaskTime(1, 1)}) and record.recent_jobs == 0


def test_a_task_map_keeps_its_good_entries_and_is_bounded() -> None:
    raw = '{"a": [3, 300], "b": [1, "x"]' + "".join(f', "t{i}": [1, 1]' for i in range(99)) + "}"
    tasks = task_times(raw)
    assert tasks["a"] == TaskTime(3, 300) and "b" not in tasks
    assert len(tasks) <= 2 * CARRIED_TASKS


def record_with(tasks: dict[str, TaskTime]) -> WorkerRecord:
    return WorkerRecord(
        "w", "h", 1, "v", "app", 0, 0, 1, ("q",), (), JobCounts(), 0.0, (), recent_tasks=tasks
    )
