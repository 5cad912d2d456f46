"""The text layout of ``taskq inspect`` and the JSON shape of its views (no Redis)."""

from __future__ import annotations

import json
import time
from dataclasses import fields

import pytest

from taskq.keys import worker_of
from taskq.ops.inspect import (
    ChildState,
    Overview,
    PendingJob,
    Ping,
    QueueStats,
    StreamStats,
    WorkerPing,
    WorkerState,
    to_json,
)
from taskq.ops.render import (
    fmt_ms,
    render_active,
    render_overview,
    render_pending,
    render_ping,
    render_workers,
    table,
)
from taskq.worker.outcome import JobCounts
from taskq.worker.record import ChildRecord, WorkerRecord
from taskq.worker.scoreboard import Scoreboard

ACTIVE_KEYS = ("worker", "child", "pid", "task", "job_id", "stream", "entry_id", "started_ms",
               "running_ms")  # fmt: skip
"""The keys of an ``inspect active --json`` row (docs/operations.md)."""


@pytest.mark.parametrize(
    ("ms", "text"),
    [
        (None, "-"),
        (0, "0ms"),
        (999, "999ms"),
        (1_000, "1.0s"),
        (12_345, "12.3s"),
        (59_999, "60.0s"),
        (60_000, "1m00s"),
        (245_000, "4m05s"),
        (3_600_000, "1h00m"),
        (11_520_000, "3h12m"),
        (86_400_000, "1d00h"),
        (187_200_000, "2d04h"),
    ],
)
def test_fmt_ms(ms: float | None, text: str) -> None:
    assert fmt_ms(ms) == text


def test_table_right_aligns_numbers_only() -> None:
    assert table(("NAME", "N"), [("a", 5), ("long", 123)]) == [
        "NAME    N",
        "a       5",
        "long  123",
    ]


def test_worker_of() -> None:
    assert worker_of("web-1:4242:0:4250") == "web-1:4242"
    assert worker_of("taskq:retry") is None
    assert worker_of("odd") is None


def stream(priority: str, waiting: int, pending: int, **kw: object) -> StreamStats:
    values: dict[str, object] = {
        "queue": "tasks",
        "priority": priority,
        "stream": f"tasks:{priority}",
        "length": waiting + pending,
        "waiting": waiting,
        "lag": None,
        "pending": pending,
        "retrying": 0,
        "next_retry_in_ms": None,
        "consumers": 1,
        "last_delivered_id": "1-0",
        "oldest_waiting_id": None,
        "oldest_waiting_age_ms": None,
        "oldest_pending_id": None,
        "oldest_pending_age_ms": None,
    }
    return StreamStats(**{**values, **kw})  # type: ignore[arg-type]


def worker(busy_task: str | None = "app.send_mail") -> WorkerState:
    job = (busy_task, "j1", "tasks:normal", "5-0", 1_000, 65_000, 1)
    children = (
        ChildState("h:10", 1, 11, "h:10:0:11", *job),
        ChildState("h:10", 2, 12, "h:10:1:12", None, None, None, None, None, None, 0),
    )
    busy = 1 if busy_task else 0
    return WorkerState(
        id="h:10",
        host="h",
        pid=10,
        version="0.1.0",
        app="app",
        queues=("tasks",),
        tasks=("app.send_mail",),
        concurrency=2,
        busy=busy,
        idle=2 - busy,
        started_ms=0,
        heartbeat_ms=7_200_000,
        heartbeat_age_ms=150,
        expires_in_ms=9_850,
        processed=10,
        failed=2,
        retried=1,
        dead=1,
        rate_per_s=3.5,
        children=children,
    )


def test_overview_lines() -> None:
    q = QueueStats(
        "tasks",
        (
            stream("high", 0, 0),
            stream("normal", 1200, 4, oldest_waiting_age_ms=192_000, oldest_pending_age_ms=12_000),
            stream("low", 0, 0),
        ),
        scheduled=3,
        next_scheduled_in_ms=250_000,
        dead=2,
        waiting=1200,
        pending=4,
        retrying=0,
    )
    lines = render_overview(Overview(0, (q,), (worker(),)))
    assert lines[:4] == [
        "QUEUE  PRIORITY  WAITING  OLDEST  PENDING  RETRYING  OLDEST PENDING",
        "tasks  high            0  -             0         0  -",
        "tasks  normal       1200  3m12s         4         0  12.0s",
        "tasks  low             0  -             0         0  -",
    ]
    assert lines[4] == "tasks: 3 scheduled (next due in 4m10s), 2 dead-lettered"
    assert lines[6].split() == [
        "WORKER", "QUEUES", "CHILDREN", "BUSY", "IDLE", "PROCESSED", "FAILED", "JOBS/S", "HEARTBEAT"
    ]  # fmt: skip
    assert lines[7].split() == ["h:10", "tasks", "2", "1", "1", "10", "2", "3.5", "150ms", "ago"]
    assert lines[8] == "1 worker(s) alive: 1/2 children busy, 3.5 jobs/s"
    assert render_overview(Overview(0, (q,), ()))[-1] == "no workers alive"


def test_workers_lines() -> None:
    lines = render_workers([worker()])
    assert lines == [
        "h:10  app=app v0.1.0 queues=tasks up 2h00m",
        "  heartbeat 150ms ago, record expires in 9.8s",
        "  processed 10  failed 2  retried 1  dead-lettered 1  3.5 jobs/s",
        "  children 2/2: 1 busy, 1 idle",
        "    #1 pid 11: app.send_mail job j1 for 1m05s",
        "    #2 pid 12: idle",
    ]


def test_active_pending_and_ping_lines() -> None:
    active = worker().children[0]
    assert render_active([active])[1].split() == [
        "h:10", "1", "11", "app.send_mail", "j1", "5-0", "1m05s"
    ]  # fmt: skip
    assert render_active([]) == ["no jobs running"]
    claimed = PendingJob(
        "tasks", "normal", "tasks:normal", "5-0", "app.t", "taskq:recover", None, "recovering",
        1_500, 2, 90_000,
    )  # fmt: skip
    assert "recovering" in render_pending([claimed])[1]
    assert render_pending([]) == ["no pending jobs"]
    ping = Ping(
        0.25, (WorkerPing("h:10", True, 150, 9_850), WorkerPing("h:11", False, 6_000, 4_000))
    )
    assert render_ping(ping) == [
        "redis: pong in 0.2ms",
        "h:10: pong (heartbeat 150ms ago, record expires in 9.8s)",
        "h:11: LATE (heartbeat 6.0s ago, record expires in 4.0s)",
        "1/2 worker(s) answered",
    ]


def test_json_of_a_view_is_its_fields() -> None:
    w = worker()
    data = to_json(w)
    assert list(data) == [f.name for f in fields(WorkerState)]
    assert list(data["children"][0]) == [f.name for f in fields(ChildState)]
    assert to_json([w])[0] == data


def test_a_running_job_goes_from_the_slot_to_the_readers_one_conversion_at_a_time() -> None:
    """Slot entry -> heartbeat record -> reader: each shape is made from the one before, the
    record's children keep the wire format older ``taskq inspect`` reads, and ``inspect
    active`` keeps its documented keys."""
    # given a child running an async job with another beside it, and an idle child
    board = Scoreboard(2, jobs=2)
    board.slot(0).start(1, "5-0", "app.send_mail", "j1", None, at=0)
    board.slot(0).start(1, "6-0", "app.send_mail", "j2", None, at=1)
    now_mono = time.monotonic() + 65.0
    streams = ("tasks:high", "tasks:normal")
    # when the master writes its record and a reader parses it at the next beat
    children = tuple(
        ChildRecord.of(
            i + 1, 11 + i, f"h:10:{i}:{11 + i}", board.read(i).running, streams, now_mono
        )
        for i in range(2)
    )
    record = WorkerRecord(
        "h:10", "h", 10, "0.1.0", "app", 0, 30_000, 2, ("tasks",), (), JobCounts(), 0.0, children
    )
    wire = record.to_fields()
    parsed = WorkerRecord.from_fields(
        {k: str(v) for k, v in {**wire, "heartbeat_ms": 100_000}.items()}
    )
    states = [
        ChildState.of("h:10", c, parsed.heartbeat_ms, now_ms=101_000) for c in parsed.children
    ]
    # then the record's children are the same JSON as ever
    busy_wire, idle_wire = json.loads(str(wire["children"]))
    assert list(busy_wire) == [
        "index", "pid", "consumer", "task", "job_id", "stream", "entry_id", "running_ms", "jobs"
    ]  # fmt: skip
    assert busy_wire["task"] == "app.send_mail" and busy_wire["job_id"] == "j1"
    assert (busy_wire["stream"], busy_wire["entry_id"], busy_wire["jobs"]) == (
        "tasks:normal",
        "5-0",
        2,
    )
    assert 64_000 < busy_wire["running_ms"] < 70_000
    assert idle_wire == {
        "index": 2, "pid": 12, "consumer": "h:10:1:12", "task": None, "job_id": None,
        "stream": None, "entry_id": None, "running_ms": None, "jobs": 0,
    }  # fmt: skip
    # and the reader places the start on the Redis clock and counts the time up to now
    busy, idle = states
    assert busy.busy and not idle.busy
    assert busy.started_ms == 100_000 - busy_wire["running_ms"]
    assert busy.running_ms == 1_000 + busy_wire["running_ms"]
    # and `inspect active` still has every key it has had
    [row] = to_json([busy])
    assert set(ACTIVE_KEYS) <= set(row)
    assert (row["worker"], row["child"], row["pid"], row["entry_id"]) == ("h:10", 1, 11, "5-0")
