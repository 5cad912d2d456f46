"""Browsing a queue's jobs per state and acting on them (taskq.ops.browse) on a real Redis:
the rows are what raw Redis holds, and every action leaves each job in exactly one place."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import redis

from taskq import App
from taskq.errors import ConfigError
from taskq.keys import GROUP, QueueKeys
from taskq.message import Message
from taskq.ops.browse import JobFilter, Jobs

pytestmark = pytest.mark.integration

Q = QueueKeys("tasks")


TASKS: dict[str, Any] = {}


@pytest.fixture
def app(make_app: Callable[..., App]) -> App:
    app = make_app()

    @app.task(name="add", store_result=True)
    def add(a: int, b: int) -> int:
        return a + b

    @app.task(name="plain")
    def plain(n: int) -> None:
        """Keeps no record."""

    TASKS.update(add=add, plain=plain)
    return app


def add_retry(r: redis.Redis, app: App, task: str, args: tuple[object, ...], due_ms: int) -> str:
    """A retry member as a worker writes it (``<first failure ms>\\n<p>\\n<task>\\n<body>``)."""
    msg = Message(task, args, queue="tasks", retries=1)
    r.zadd(Q.retry("normal"), {b"1\n1\n" + task.encode() + b"\n" + app.encode(msg): due_ms})
    return msg.id


def in_redis(r: redis.Redis, job_id: str) -> int:
    """In how many places of the queue a job's id appears (streams, schedule, retry sets)."""
    places = 0
    for stream in Q.streams:
        places += sum(job_id.encode() in f[b"body"] for _, f in r.xrange(stream))
    for key in (Q.schedule, *(Q.retry(p) for p in ("high", "normal", "low"))):
        places += sum(job_id.encode() in m for m in r.zrange(key, 0, -1))
    return places


def test_waiting_pages_follow_raw_redis(app: App, r: redis.Redis) -> None:
    jobs = [TASKS["plain"].delay(i) for i in range(7)]
    r.xgroup_create(Q.stream("normal"), GROUP, id="0", mkstream=True)
    r.xreadgroup(GROUP, "c", {Q.stream("normal"): ">"}, count=2)  # two delivered: running
    browse = Jobs(app, "tasks")
    first = browse.page("waiting", limit=3)
    second = browse.page("waiting", limit=3, after=first.after)
    ids = [row.job_id for p in (first, second) for row in p.rows]
    assert ids == [j.id for j in jobs[2:]]
    assert second.after is None
    running = browse.page("running")
    assert [row.job_id for row in running.rows] == [j.id for j in jobs[:2]]
    raw = [e for e, _ in r.xrange(Q.stream("normal"))][2:]
    assert [row.ref for p in (first, second) for row in p.rows] == [e.decode() for e in raw]


def test_scheduled_and_retrying_rows(app: App, r: redis.Redis) -> None:
    later = [TASKS["add"].apply_async((i, i), countdown=3600) for i in range(3)]
    retry_id = add_retry(r, app, "add", ("<script>",), 10**13)
    browse = Jobs(app, "tasks")
    scheduled = browse.page("scheduled", limit=2)
    rest = browse.page("scheduled", limit=2, after=scheduled.after)
    assert sorted(x.job_id for x in scheduled.rows + rest.rows) == sorted(j.id for j in later)
    [row] = browse.page("retrying").rows
    assert (row.job_id, row.task, row.due_ms) == (retry_id, "add", 10**13)
    assert "<script>" in row.args


def test_filters_are_bounded(app: App) -> None:
    for i in range(30):
        TASKS["plain" if i % 3 else "add"].delay(i, *([] if i % 3 else [i]))
    browse = Jobs(app, "tasks")
    page = browse.page("waiting", where=JobFilter(task="add"), scan_limit=12)
    assert page.scanned == 12
    assert len(page.rows) == 4 and page.after is not None
    assert all(row.task == "add" for row in page.rows)
    args = browse.page("waiting", where=JobFilter.parse(["args=27"]))
    assert [row.args for row in args.rows] == ["27, 27"]
    rows = browse.page("waiting").rows
    middle = rows[10].enqueued_ms
    assert middle is not None
    timed = browse.page("waiting", where=JobFilter(since=str(middle), until=str(middle)))
    assert {row.job_id for row in timed.rows} == {r.job_id for r in rows if r.enqueued_ms == middle}
    iso = JobFilter.parse(["since=2000-01-01T00:00", "until=2000-01-02"])
    assert browse.page("waiting", where=iso).rows == ()
    with pytest.raises(ConfigError):
        JobFilter(since="yesterday")
    with pytest.raises(ConfigError):
        JobFilter.parse(["nope=1"])
    with pytest.raises(ConfigError):
        browse.page("waiting", after="../x")


def test_delete_and_move_keep_one_place(app: App, r: redis.Redis) -> None:
    jobs = [TASKS["add"].delay(i, i) for i in range(4)]
    browse = Jobs(app, "tasks")
    rows = list(browse.page("waiting").rows)
    assert browse.delete("waiting", rows[:2]) == 2
    assert browse.delete("waiting", rows[:2]) == 0  # idempotent
    assert jobs[0].status().state == "cancelled"
    assert browse.move(rows[2:3], "high") == 1
    assert browse.move(rows[2:3], "high") == 0
    [high] = browse.page("waiting", priority="high").rows
    assert high.job_id == jobs[2].id
    assert app.job(jobs[2].id, queue="tasks").status().state == "waiting"
    assert [in_redis(r, j.id) for j in jobs] == [0, 0, 1, 1]


def test_retry_now_makes_them_due_and_promote_moves_them(app: App, r: redis.Redis) -> None:
    ids = [add_retry(r, app, "plain", (i,), 10**13) for i in range(3)]
    browse = Jobs(app, "tasks")
    rows = list(browse.page("retrying").rows)
    assert browse.retry_now("retrying", rows[:2]) == 2
    assert browse.retry_now("retrying", rows[:2]) == 2  # due already: nothing changes
    app.broker.promote()
    assert [row.job_id for row in browse.page("retrying").rows] == [rows[2].job_id]
    made_due = sorted(row.job_id for row in rows[:2])
    assert sorted(row.job_id for row in browse.page("waiting").rows) == made_due
    assert all(in_redis(r, i) == 1 for i in ids)


def test_cancel_by_reference_and_all_matching(app: App, r: redis.Redis) -> None:
    keep = [TASKS["plain"].delay(i) for i in range(3)]
    gone = [TASKS["add"].delay(i, 0) for i in range(5)]
    browse = Jobs(app, "tasks")
    done = sum(
        browse.cancel("waiting", batch)
        for batch in browse.each("waiting", where=JobFilter(task="add"))
    )
    assert done == 5
    assert [row.job_id for row in browse.page("waiting").rows] == [j.id for j in keep]
    assert all(j.status().state == "cancelled" for j in gone)
    [row] = browse.find("waiting", [browse.page("waiting").rows[0].ref])
    assert row.job_id == keep[0].id
    assert browse.cancel("waiting", [row]) == 1
    assert in_redis(r, keep[0].id) == 0


def test_cancel_in_a_batch_ends_a_chains_later_steps(task_app: App) -> None:
    """A chain's first step is handed back by the batch script and cancelled by cancel.lua,
    which ends its later step too; the plain jobs go in the batch."""
    from taskq.canvas import chain
    from tests import tasks

    flow = chain(tasks.add.s(1, 2), tasks.add.s(10)).apply_async()
    others = [tasks.add.delay(5, 5) for _ in range(2)]
    browse = Jobs(task_app, task_app.settings.queue)
    rows = list(browse.page("waiting").rows)
    assert len(rows) == 3
    assert browse.cancel("waiting", rows) == 3
    assert [j.status().state for j in others] == ["cancelled", "cancelled"]
    steps = task_app.records.flow_view(flow.queue, flow.id).steps
    assert [s.state for s in steps] == ["cancelled", "cancelled"]


def test_held_jobs_of_a_limited_task(app: App, r: redis.Redis) -> None:
    @app.task(name="limited", concurrency_limit=1)
    def limited(n: int) -> None:
        """At most one runs at a time."""

    msgs = [Message("limited", (i,), queue="tasks") for i in range(3)]
    for i, msg in enumerate(msgs):  # as slot.lua parks them: "<p>\n<task>\n<body>"
        r.zadd(Q.held("limited"), {b"1\nlimited\n" + app.encode(msg): i})
    browse = Jobs(app, "tasks")
    assert browse.held_tasks() == ["limited"]
    page = browse.page("held", limit=2)
    rest = browse.page("held", after=page.after)
    assert [row.job_id for row in page.rows + rest.rows] == [m.id for m in msgs]
    assert all(row.due_ms is None for row in page.rows)
