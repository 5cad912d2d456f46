"""Per-task duration summaries (taskq.broker.taskstats.Summary): percentiles from the
histogram stay within 5 % of the exact ones, and what Redis's Lua packs reads back."""

from __future__ import annotations

import math
import random

import msgpack
from hypothesis import given
from hypothesis import strategies as st

from taskq.broker.taskstats import Summary, bucket_ms, bucket_of


def exact(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


def test_percentiles_within_five_percent() -> None:
    rng = random.Random(7)
    for spread in (1.0, 3.0, 8.0):
        values = [math.exp(rng.gauss(3.0, spread / 3)) for _ in range(2000)]
        s = Summary()
        for v in values:
            s.add(v, failed=False, retried=False)
        for q in (0.5, 0.95):
            got = s.percentile_ms(q)
            assert got is not None
            assert abs(got - exact(values, q)) <= 0.05 * exact(values, q), (spread, q)
        assert s.max_ms == max(values)


def test_buckets_cover_their_durations() -> None:
    for ms in (0.001, 0.5, 1.0, 37.0, 1_000.0, 3_600_000.0):
        assert abs(bucket_ms(bucket_of(ms)) - ms) <= 0.05 * ms or ms <= 0.01


def test_merge_and_pack() -> None:
    a, b = Summary(), Summary()
    a.add(10, failed=True, retried=True)
    b.add(20, failed=False, retried=False)
    a.merge(Summary.unpack(b.pack()) or Summary())
    assert (a.runs, a.failures, a.retries, a.max_ms) == (2, 1, 1, 20)
    # Lua's cmsgpack packs a table keyed 1..n as an array.
    lua_form = msgpack.packb([3, 0, 0, 1.5, [2, 1]])
    found = Summary.unpack(lua_form)
    assert found is not None and found.buckets == {1: 2, 2: 1}
    assert Summary.unpack(b"not msgpack") is None
    assert Summary().percentile_ms(0.5) is None


def test_children_count_runs_in_their_slot_and_the_master_takes_them() -> None:
    """What the master sends with its heartbeat: each run that ended, per stream and task,
    from the child's slot; a take empties the counts, and a job that did not run is not
    counted."""
    from taskq.worker.scoreboard import Scoreboard

    board = Scoreboard(2)
    slot = board.slot(1)
    durations = [1.0 + i for i in range(40)]
    for i, ms in enumerate(durations):
        slot.start(0, f"1-{i}", "app.work", f"j{i}", None)
        slot.finish("ok" if i % 4 else "retry", ran_ms=ms)
    slot.start(1, "2-0", "app.other", "k", None)
    slot.finish("dead", ran_ms=5.0)
    slot.finish("dead")  # rejected before it started: no run
    slot.start(1, "2-1", "app.other", "k2", None)
    slot.finish("cancelled", ran_ms=3.0)  # cancelled while running: did not end a run
    assert board.take_runs(0) == []
    taken = {(r.stream_index, r.task): r.summary for r in board.take_runs(1)}
    work, other = taken[0, "app.work"], taken[1, "app.other"]
    assert (work.runs, work.failures, work.retries, work.max_ms) == (40, 10, 10, 40.0)
    p95 = work.percentile_ms(0.95)
    assert p95 is not None and abs(p95 - exact(durations, 0.95)) <= 0.1 * exact(durations, 0.95)
    assert (other.runs, other.failures, other.retries) == (1, 1, 0)
    assert board.take_runs(1) == []  # taken once
    slot.start(0, "1-99", "app.work", "j99", None)
    slot.finish("ok", ran_ms=2.0)
    again = board.take_runs(1)
    assert [(r.task, r.summary.runs, r.summary.max_ms) for r in again] == [("app.work", 1, 2.0)]


def test_a_full_run_table_reuses_the_entries_the_master_emptied() -> None:
    from taskq.worker.runstats import ENTRIES
    from taskq.worker.scoreboard import Scoreboard

    board = Scoreboard(1)
    slot = board.slot(0)

    def run(task: str) -> None:
        slot.start(0, "1-1", task, "j", None)
        slot.finish("ok", ran_ms=1.0)

    for i in range(ENTRIES + 1):  # one task too many between two takes: not counted
        run(f"t{i}")
    assert len(board.take_runs(0)) == ENTRIES
    run("late")
    run("t0")
    assert sorted(r.task for r in board.take_runs(0)) == ["late", "t0"]


def test_short_runs_wait_in_the_child_until_its_next_fetch() -> None:
    """Runs under SHORT_RUN_MS reach the table at ``count_runs`` (the consumer's fetch), a
    longer run at once with those before it, and never more than MAX_WAITING wait."""
    from taskq.worker.runstats import MAX_WAITING, SHORT_RUN_MS
    from taskq.worker.scoreboard import Scoreboard

    board = Scoreboard(1)
    slot = board.slot(0)

    def run(task: str, ms: float, kind: str = "ok") -> None:
        slot.start(0, "1-1", task, "j", None)
        slot.finish(kind, ran_ms=ms)

    short = SHORT_RUN_MS / 10
    run("app.quick", short)
    run("app.quick", short, "retry")
    assert board.take_runs(0) == []  # not counted yet
    slot.count_runs()
    [quick] = board.take_runs(0)
    assert (quick.task, quick.summary.runs, quick.summary.failures) == ("app.quick", 2, 1)
    slot.count_runs()  # nothing waits: nothing counted twice
    assert board.take_runs(0) == []

    run("app.quick", short)
    run("app.slow", SHORT_RUN_MS * 5)  # not short: counted at once, the short one with it
    taken = {r.task: r.summary.runs for r in board.take_runs(0)}
    assert taken == {"app.quick": 1, "app.slow": 1}

    for _ in range(MAX_WAITING):
        run("app.quick", short)
    [bounded] = board.take_runs(0)  # the last of them filled the list: counted
    assert bounded.summary.runs == MAX_WAITING


@given(
    st.lists(
        st.tuples(
            st.sampled_from(["app.a", "app.b"]),
            st.sampled_from(["ok", "retry", "dead"]),
            st.floats(min_value=0.0, max_value=0.999),
        ),
        max_size=60,
    )
)
def test_a_batch_of_short_runs_counts_as_its_runs_one_by_one(
    runs: list[tuple[str, str, float]],
) -> None:
    """Short runs wait and count together at the fetch (grouped by kind); the table then
    holds what a summary that added each run in turn holds."""
    from taskq.worker.scoreboard import Scoreboard

    board = Scoreboard(1)
    slot = board.slot(0)
    expected: dict[str, Summary] = {}
    for i, (task, kind, ms) in enumerate(runs):
        slot.start(0, f"1-{i}", task, f"j{i}", None)
        slot.finish(kind, ran_ms=ms)
        failed, retried = kind != "ok", kind == "retry"
        expected.setdefault(task, Summary()).add(ms, failed=failed, retried=retried)
    slot.count_runs()
    got = {r.task: r.summary for r in board.take_runs(0)}
    assert got.keys() == expected.keys()
    for task, want in expected.items():
        s = got[task]
        assert (s.runs, s.failures, s.retries, s.buckets) == (
            want.runs,
            want.failures,
            want.retries,
            want.buckets,
        )
        assert s.max_ms == want.max_ms
