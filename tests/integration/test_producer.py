"""Producer side against a real server: entries, bulk round trips, refusals, key slots."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

import msgpack
import pytest
import redis
from redis.crc import key_slot

from taskq import App, EnqueueError, PayloadTooLarge
from taskq.broker.resp import Command
from taskq.keys import QueueKeys

pytestmark = pytest.mark.integration


def test_delay_writes_one_readable_entry_per_job(
    make_app: Callable[..., App], r: redis.Redis
) -> None:
    app = make_app()

    @app.task(name="mail.send")
    def send(to: str, *, subject: str) -> None: ...

    job = send.delay("a@example.com", subject="hi")
    [(entry_id, fields)] = r.xrange("tasks:normal")
    assert entry_id.decode() == job.entry_id
    assert fields[b"task"] == b"mail.send"  # readable in redis-cli XRANGE
    body = msgpack.unpackb(fields[b"body"], raw=False)
    assert body["v"] == 1 and body["id"] == job.id and body["task"] == "mail.send"
    assert body["args"] == ["a@example.com"] and body["kwargs"] == {"subject": "hi"}
    assert body["priority"] == "normal" and body["queue"] == "tasks" and body["retries"] == 0
    assert abs(body["created_ms"] - time.time() * 1000) < 5000


def test_priority_and_queue_choose_the_stream(make_app: Callable[..., App], r: redis.Redis) -> None:
    app = make_app()

    @app.task(priority="high", queue="{mail}")
    def notify() -> None: ...

    notify.delay()
    notify.apply_async(priority="low")
    notify.apply_async(queue="other")
    assert (r.xlen("{mail}:high"), r.xlen("{mail}:low"), r.xlen("other:high")) == (1, 1, 1)


def test_countdown_goes_to_the_schedule(make_app: Callable[..., App], r: redis.Redis) -> None:
    app = make_app()

    @app.task
    def later() -> None: ...

    job = later.apply_async(countdown=60)
    assert job.entry_id is None and job.eta_ms is not None
    assert r.zcard("tasks:schedule") == 1 and r.xlen("tasks:normal") == 0
    [(_member, score)] = r.zrange("tasks:schedule", 0, -1, withscores=True)
    seconds, micros = r.time()
    redis_now_ms = seconds * 1000 + micros // 1000
    assert redis_now_ms + 58_000 < score <= redis_now_ms + 60_000  # by the Redis clock


def test_bulk_enqueue_costs_one_round_trip_per_batch(
    make_app: Callable[..., App], r: redis.Redis
) -> None:
    app = make_app()

    @app.task
    def square(x: int) -> None: ...

    app.reader.ping_ms()  # connect first so only the bulk's own round trips count
    r.config_resetstat()
    jobs = square.map(range(2500))
    stats = r.info("commandstats")
    assert len(jobs) == 2500 and r.xlen("tasks:normal") == 2500
    assert stats["cmdstat_xadd"]["calls"] == 2500
    # Count round trips by the client's socket: 2,500 jobs in batches of 1,000 is 3 sends.
    assert _round_trips(app, lambda: square.map(range(2500))) == 3


def _round_trips(app: App, action: Callable[[], object]) -> int:
    link = app.link  # white-box: every write of the link is one call of its _send
    sends = 0
    original = link._send

    def counting(commands: Sequence[Command]) -> list[Any]:
        nonlocal sends
        sends += 1
        return original(commands)

    link._send = counting  # type: ignore[method-assign]
    try:
        action()
    finally:
        del link._send
    return sends


def test_bad_argument_sends_nothing(make_app: Callable[..., App], r: redis.Redis) -> None:
    app = make_app()

    @app.task
    def store(x: object) -> None: ...

    with pytest.raises(EnqueueError, match="argument 0 \\(object\\)"):
        store.delay(object())
    with pytest.raises(EnqueueError):
        store.starmap([(1,), (2,), (object(),)])
    assert r.xlen("tasks:normal") == 0


def test_oversize_job_sends_nothing(make_app: Callable[..., App], r: redis.Redis) -> None:
    app = make_app(max_payload_bytes=1024)

    @app.task
    def store(x: object) -> None: ...

    with pytest.raises(PayloadTooLarge, match="1024-byte limit"):
        store.delay("x" * 2048)
    assert r.xlen("tasks:normal") == 0


def test_keys_of_a_hash_tagged_queue_share_one_slot() -> None:
    k = QueueKeys("{tasks}")
    keys = [
        *k.streams,
        k.deadletter,
        k.schedule,
        k.due,
        k.sweeper,
        k.workers,
        k.worker("host:1"),
        *(k.retry(p) for p in ("high", "normal", "low")),
        k.visibility,
    ]
    assert len({key_slot(key.encode()) for key in keys}) == 1
    assert QueueKeys("tasks").stream("high") == "tasks:high"
    assert QueueKeys("tasks").deadletter == "tasks:deadletter"


def test_password_in_url_is_used(redis_url: str, r: redis.Redis) -> None:
    r.acl_setuser("producer", enabled=True, passwords=["+s3cret"], keys=["*"], commands=["+@all"])
    url = redis_url.replace("redis://", "redis://producer:s3cret@")
    app = App(url)

    @app.task(name="acl.t")
    def t() -> None: ...

    t.delay()
    assert r.xlen("tasks:normal") == 1
    bad = App(redis_url.replace("redis://", "redis://producer:wrong@"))
    with pytest.raises(Exception, match=r"(?i)invalid|WRONGPASS|password"):
        bad.enqueue(t.message((), {}))
    app.close()
    bad.close()


def test_unreachable_redis_is_a_one_line_broker_error() -> None:
    app = App("redis://127.0.0.1:1/0")

    @app.task(name="nowhere.t")
    def t() -> None: ...

    with pytest.raises(
        Exception, match=r"cannot reach Redis at redis://127.0.0.1:1/0.*taskq server"
    ):
        t.delay()


def test_eager_mode_runs_inline_without_redis() -> None:
    app = App("redis://127.0.0.1:1/0", eager=True)
    ran: list[int] = []

    @app.task
    def collect(x: int) -> None:
        ran.append(x)

    collect.delay(1)
    collect.map([2, 3])
    assert ran == [1, 2, 3]
    assert collect(4) is None and ran[-1] == 4  # a direct call runs inline too
