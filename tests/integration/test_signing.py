"""Signed jobs (issue 17, point 3) against a real Redis and real worker processes."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import msgpack
import pytest
import redis

from taskq import App, chord, group
from taskq.ops.deadletters import Deadletters
from taskq.signing import key_id
from taskq.testing import drain
from tests import tasks
from tests.conftest import WorkerProcess, runs, wait_until

StartWorker = Callable[..., WorkerProcess]
K1, K2 = "rotation-key-one-0123456789", "rotation-key-two-0123456789"


@pytest.fixture
def keys(task_app: App) -> Iterator[Callable[..., None]]:
    """Set the producer's (``tests.tasks.app``'s) signing keys; unset at the end."""
    before = task_app.settings

    def use(*signing_keys: str) -> None:
        task_app.settings = task_app.settings.replace(signing_keys=signing_keys)

    yield use
    task_app.settings = before


def _worker(start_worker: StartWorker, *signing_keys: str) -> WorkerProcess:
    args = ("-A", "tests.tasks", "-c", "2", "--loglevel", "warning")
    return start_worker(*args, TASKQ_SIGNING_KEYS=",".join(signing_keys))


def _dead(r: redis.Redis) -> list[dict[bytes, bytes]]:
    return [fields for _, fields in r.xrange("tasks:deadletter")]


def _values(r: redis.Redis) -> list[Any]:
    return [x["value"] for x in runs(r) if "value" in x]


def test_signed_jobs_run_and_the_rest_are_refused(
    keys: Callable[..., None], task_app: App, r: redis.Redis, start_worker: StartWorker
) -> None:
    keys(K1)
    tasks.echo.delay("signed")
    tasks.echo.apply_async(("delayed",), countdown=0.3)
    tasks.flaky_once.delay(0.1)  # its retry is signed again by the worker
    tasks.exclusive.map(range(3))  # waits for a slot, out of its stream, and comes back
    chained = (tasks.add.s(1, 2) | tasks.add.s(10)).delay()  # the next step: the worker signs
    joined = chord(group(tasks.square.s(i) for i in range(4)), tasks.tsum.s()).apply_async()
    body = msgpack.packb({"v": 1, "id": "forged", "task": "tests.tasks.echo", "args": ["x"]})
    r.xadd("tasks:normal", {"task": "tests.tasks.echo", "body": body})  # unsigned
    signed = tasks.app.encode(tasks.echo.message(("changed",), {}))
    r.xadd(
        "tasks:normal", {"task": "tests.tasks.echo", "body": signed.replace(b"changed", b"chAnged")}
    )
    keys(K2)
    tasks.echo.delay("unknown key")
    keys(K1)
    _worker(start_worker, K1)
    assert chained.result(timeout=20) == 13
    assert joined.result(timeout=20) == sum(i * i for i in range(4))
    wait_until(lambda: len(_dead(r)) == 3, 20, message="the three refused entries")
    tasks.echo.delay("after")  # the worker keeps serving
    wait_until(lambda: "after" in _values(r), 20, message="a job after the refused ones")
    wait_until(lambda: len([x for x in runs(r) if x.get("tag") == "retried"]) == 1, 20)
    wait_until(lambda: len([x for x in runs(r) if x.get("tag") == "exclusive"]) == 3, 20)
    assert sorted(_values(r)) == ["after", "delayed", "signed"]
    reasons = sorted(d[b"error"].decode() for d in _dead(r))
    assert reasons[0].startswith("refused: bad signature (key id ")
    assert reasons[1].startswith("refused: signed with unknown key id ")
    assert reasons[2] == "refused: unsigned job: this worker runs only signed jobs"
    assert all(d[b"error_type"] == b"Rejected" and d[b"attempts"] == b"0" for d in _dead(r))


def test_a_trailer_with_a_non_ascii_mac_is_refused_and_the_child_serves_on(
    keys: Callable[..., None], task_app: App, r: redis.Redis, start_worker: StartWorker
) -> None:
    # Given: a body "signed" with the worker's (public) key id and a MAC of non-ASCII text.
    keys(K1)
    signed = tasks.app.encode(tasks.echo.message(("forged",), {}))
    forged = signed[:-76] + msgpack.packb([key_id(K1), "é" * 64])
    r.xadd("tasks:normal", {"task": "tests.tasks.echo", "body": forged})
    tasks.echo.delay("after")
    # When: one child takes both.
    w = start_worker("-A", "tests.tasks", "-c", "1", TASKQ_SIGNING_KEYS=K1)
    # Then: the forged one is dead-lettered, the next one runs, no child crashed.
    wait_until(lambda: "after" in _values(r), 20, message="the job after the forged one")
    [dead] = _dead(r)
    assert dead[b"error"] == b"refused: malformed signature trailer"
    assert _values(r) == ["after"]
    assert "crashed" not in w.output() and "died" not in w.output(), w.output()


def test_a_refused_job_is_not_retried_from_the_deadletter_stream(
    keys: Callable[..., None],
    task_app: App,
    r: redis.Redis,
    redis_url: str,
    start_worker: StartWorker,
) -> None:
    keys(K2)
    tasks.rejects.delay("k2")  # dead at once: an operator may retry it
    keys(K1)
    tasks.echo.delay("k1 only")  # refused by a K2 worker
    w = _worker(start_worker, K2)
    wait_until(lambda: len(_dead(r)) == 2, 20, message="two dead letters")
    w.stop()  # the retried job stays in its stream
    moved, skipped = Deadletters.for_app(App(redis_url, signing_keys=[K2])).retry(None)
    assert moved == 1
    assert [why for _, why in skipped] == [
        f"signed with unknown key id {key_id(K1)!r}: not retried (purge it)"
    ]  # the worker's own key ids are in its log, not in text others may read
    _, skipped = Deadletters.for_app(App(redis_url)).retry(None)
    assert [why for _, why in skipped] == [
        "a signed job: retrying it needs the signing keys (TASKQ_SIGNING_KEYS)"
    ]


@pytest.mark.slow
def test_keys_rotate_under_load_with_no_dead_letter(
    keys: Callable[..., None], task_app: App, r: redis.Redis, start_worker: StartWorker
) -> None:
    """The procedure of docs/security.md: workers learn the new key, producers sign with it,
    workers sign with it, and the old key goes once nothing signed with it is left."""
    sent: list[int] = []
    stop = threading.Event()

    def produce() -> None:
        n = 0
        while not stop.is_set():
            if n % 10:
                tasks.echo.delay(n)
            else:  # fails once: its retry may cross a step of the rotation
                tasks.flaky_once.delay(0.05, n)
            sent.append(n)
            n += 1
            time.sleep(0.002)

    keys(K1)
    old = _worker(start_worker, K1)
    producer = threading.Thread(target=produce)
    producer.start()
    try:
        for step in ("workers accept K2", "producers sign with K2", "workers sign with K2"):
            _wait_for_more(sent, f"jobs sent before: {step}")
            if step == "producers sign with K2":
                keys(K2, K1)
                continue
            new = _worker(start_worker, *((K1, K2) if step == "workers accept K2" else (K2, K1)))
            old.stop()  # warm: its unfinished jobs go back to the stream
            old = new
        _wait_for_more(sent, "jobs sent after the rotation")
    finally:
        stop.set()
        producer.join()
    total = len(sent)
    wait_until(lambda: _done(r) >= total, 60, message="every job sent so far")
    last = _worker(start_worker, K2)  # nothing signed with K1 is left: the key can go
    old.stop()
    keys(K2)
    tasks.echo.map(range(total, total + 50))
    wait_until(lambda: _done(r) >= total + 50, 30, message="the jobs after the old key went")
    assert _dead(r) == []
    echoed = {x["value"] for x in runs(r) if "value" in x}
    retried = [x for x in runs(r) if x.get("tag") == "retried"]
    assert echoed | {x["retry_of"] for x in retried} == set(range(total + 50))
    last.stop()


def _wait_for_more(sent: list[int], message: str) -> None:
    mark = len(sent)
    wait_until(lambda: len(sent) > mark + 300, 20, message=message)


def _done(r: redis.Redis) -> int:
    return len({x.get("value", x.get("retry_of")) for x in runs(r)})


def test_a_signed_chord_runs_only_the_state_its_header_was_signed_with(
    keys: Callable[..., None], task_app: App, r: redis.Redis
) -> None:
    # given a signed chord whose stored body op is rewritten to a well-formed op of another
    # task (the chord's state lives in Redis, where the producer role may write it)
    keys(K1)
    c = chord(group(tasks.square.s(i) for i in range(2)), tasks.collect.s()).apply_async()
    [key] = r.keys("tasks:chord:*")
    op = msgpack.unpackb(r.hget(key, "op"), raw=True)  # packed for Lua: strings as raw
    op[2] = b"tests.tasks.echo"
    r.hset(key, "op", msgpack.packb(op))
    # when the header runs, then the rewritten state is not run, and nothing is dead
    result = drain(task_app, timeout_s=20)
    assert len(result.of_task("tests.tasks.square")) == 2
    assert r.exists(key) and not r.xlen("tasks:deadletter")
    assert not [x for x in runs(r) if x.get("tag") == "collect"]
    assert c.status().state == "pending"
