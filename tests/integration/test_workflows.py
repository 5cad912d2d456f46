"""Workflows (issue 14): chains, groups, chords and callbacks, against real Redis and real
worker processes."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import msgpack
import pytest
import redis
from click.testing import CliRunner

from taskq import App, ConfigError, TaskFailed, chain, chord, group
from taskq.cli import main
from taskq.testing import drain
from taskq.worker.outcome import OK
from tests import tasks
from tests.conftest import WorkerProcess, runs, wait_until

StartWorker = Callable[..., WorkerProcess]


def _tags(r: redis.Redis, tag: str) -> list[dict[str, Any]]:
    return [x for x in runs(r) if x.get("tag") == tag]


def test_chain_passes_each_result_on(task_app: App) -> None:
    flow = chain(tasks.add.s(1, 2), tasks.add.s(10), tasks.add.s(100)).apply_async()
    also = (tasks.add.s(1, 1) | tasks.add.si(5, 5) | tasks.add.s(1)).apply_async()
    drain(task_app, timeout_s=20)
    assert flow.result(timeout=1) == 113
    assert also.result(timeout=1) == 11  # the immutable step ignored its parent's 2
    view = task_app.records.flow_view(flow.queue, flow.id)
    assert [s.value for s in view.steps] == [3, 13, 113]
    assert [s.args for s in view.steps] == [(1, 2), (3, 10), (13, 100)]


def test_a_failing_middle_step_stops_the_chain(task_app: App, r: redis.Redis) -> None:
    flow = chain(tasks.add.s(1, 1), tasks.fails_stored.s(), tasks.tag.s("never")).apply_async()
    drain(task_app, timeout_s=20)
    with pytest.raises(TaskFailed) as caught:
        flow.result(timeout=1)
    assert caught.value.task == "tests.tasks.fails_stored"
    assert caught.value.type == "KeyError"
    assert not _tags(r, "never")
    view = task_app.records.flow_view(flow.queue, flow.id)
    assert [s.state for s in view.steps] == ["succeeded", "failed", "failed"]
    last = view.steps[2]
    assert last.cause is not None and last.cause.task == "tests.tasks.fails_stored"


def test_a_step_failing_for_good_ends_every_later_step(task_app: App, r: redis.Redis) -> None:
    # given a chain of five whose second step fails for good
    steps = [tasks.tag.s("c"), tasks.tag.s("d"), tasks.tag.s("e")]
    flow = chain(tasks.add.s(1, 1), tasks.fails_stored.s(), *steps).apply_async()
    drain(task_app, timeout_s=20)
    # then every step after it ends failed, and the workflow's result answers at once
    view = task_app.records.flow_view(flow.queue, flow.id)
    assert [s.state for s in view.steps] == ["succeeded", "failed", "failed", "failed", "failed"]
    with pytest.raises(TaskFailed):
        flow.result(timeout=1)


def test_group_results_in_order(task_app: App, start_worker: StartWorker) -> None:
    # given members that finish in the reverse of their order
    g = group(tasks.slow_add.s(i, 0, 0.05 * (5 - i)) for i in range(6)).apply_async()
    start_worker("-A", "tests.tasks", "-c", "3", "--loglevel", "warning")
    assert g.result(timeout=30) == list(range(6))
    mixed = group(tasks.add.s(1, 1), tasks.fails_stored.s("x"), tasks.add.s(2, 2)).apply_async()
    got = mixed.results(timeout=30, return_exceptions=True)
    assert got[0] == 2 and got[2] == 4
    assert isinstance(got[1], TaskFailed) and got[1].type == "KeyError"
    with pytest.raises(TaskFailed):
        mixed.result(timeout=1)


def test_chord_body_gets_the_header_results_in_order(task_app: App, r: redis.Redis) -> None:
    c = chord(group(tasks.square.s(i) for i in range(20)), tasks.collect.s()).apply_async()
    drain(task_app, timeout_s=20)
    assert c.result(timeout=1) == [i * i for i in range(20)]
    assert len(_tags(r, "collect")) == 1
    assert not r.keys("tasks:chord:*")  # the chord's state went with its end


@pytest.mark.slow
def test_chord_of_1000_survives_sigkilled_workers(
    task_app: App, start_worker: StartWorker, r: redis.Redis
) -> None:
    # given a 1,000-job chord under way on two workers
    header = group(tasks.square.s(i, 0.004) for i in range(1000))
    c = chord(header, tasks.tsum.s()).apply_async()
    first = [start_worker("-A", "tests.tasks", "-c", "2", "--loglevel", "error") for _ in (1, 2)]
    wait_until(
        lambda: _header_done(r) >= 200, timeout_s=30, message="a fifth of the header to finish"
    )
    # when both are SIGKILLed mid-chord, and new workers finish it
    for w in first:
        w.kill_all()
    assert _header_done(r) < 1000
    start_worker("-A", "tests.tasks", "-c", "2", "--loglevel", "error")
    # then the body runs once, with all 1,000 results
    assert c.result(timeout=90) == sum(i * i for i in range(1000))
    body_runs = _tags(r, "tsum")
    assert len(body_runs) == 1 and body_runs[0]["n"] == 1000
    assert not r.keys("tasks:chord:*")


def _header_done(r: redis.Redis) -> int:
    keys = r.keys("tasks:chord:*")
    return int(r.hget(keys[0], "done") or 0) if keys else 1000


def test_a_header_job_run_twice_counts_once(task_app: App, r: redis.Redis) -> None:
    c = chord(group(tasks.square.s(i) for i in range(3)), tasks.collect.s()).apply_async()
    # given a copy of the first header job's entry: it runs twice
    [(_entry_id, fields)] = r.xrange("tasks:normal", count=1)
    r.xadd("tasks:normal", fields)
    result = drain(task_app, timeout_s=20)
    assert len(result.of_task("tests.tasks.square")) == 4
    assert c.result(timeout=1) == [0, 1, 4]
    assert len(_tags(r, "collect")) == 1


def test_a_failing_header_fails_the_chord_once(task_app: App, r: redis.Redis) -> None:
    header = group(tasks.add.s(1, 1), tasks.fails_stored.s("a"), tasks.fails_stored.s("b"))
    c = chord(header, tasks.collect.s()).on_error(tasks.errback.s()).apply_async()
    drain(task_app, timeout_s=20)
    with pytest.raises(TaskFailed) as caught:
        c.result(timeout=1)
    assert caught.value.task == "tests.tasks.fails_stored"
    assert not _tags(r, "collect")
    callbacks = _tags(r, "errback")
    assert len(callbacks) == 1 and callbacks[0]["failed"] == caught.value.job_id
    assert not r.keys("tasks:chord:*")


def test_nested_forms(task_app: App) -> None:
    # a group inside a chain is a chord; a chain inside a group; a chord inside a chain;
    # a chain as a chord's body; a chain ending in a group
    implicit = (tasks.add.s(1, 1) | group(tasks.add.s(1), tasks.add.s(2)) | tasks.tsum.s()).delay()
    members = group(tasks.add.s(1, 1) | tasks.add.s(1), tasks.add.s(5, 5)).delay()
    inner = chord(group(tasks.square.si(2), tasks.square.si(3)), tasks.tsum.s())
    outer = chain(tasks.add.s(0, 1), tasks.tag.si("start", "x"), inner, tasks.add.s(100)).delay()
    body_chain = chord(group(tasks.square.s(1), tasks.square.s(2)), tasks.tsum.s() | tasks.add.s(1))
    ending = (tasks.add.s(1, 1) | group(tasks.add.s(10), tasks.add.s(20))).delay()
    body = body_chain.delay()
    drain(task_app, timeout_s=30)
    assert implicit.result(timeout=1) == 3 + 4
    assert members.result(timeout=1) == [3, 10]
    assert outer.result(timeout=1) == 4 + 9 + 100
    assert body.result(timeout=1) == 1 + 4 + 1
    assert ending.result(timeout=1) == [12, 22]


def test_unsupported_forms_are_clear_errors(task_app: App) -> None:
    with pytest.raises(ConfigError, match="group's members"):
        group(group(tasks.add.s(1, 1)), tasks.add.s(1, 1))  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="body"):
        chord(group(tasks.add.s(1, 1)), group(tasks.add.s(1)))  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="countdown"):
        chord(group(tasks.add.s(1, 1)), tasks.tsum.s().set(countdown=5)).delay()


def test_link_and_link_error_callbacks(task_app: App, r: redis.Redis) -> None:
    ok = tasks.add.apply_async((2, 3), link=tasks.tag.s("linked"), link_error=tasks.errback.s())
    bad = tasks.fails_stored.apply_async(("x",), link_error=[tasks.errback.s()])
    drain(task_app, timeout_s=20)
    assert ok.result(timeout=1) == 5
    [linked] = _tags(r, "linked")
    assert linked["got"] == 5
    [called] = _tags(r, "errback")
    assert called["failed"] == bad.id


def test_steps_with_a_countdown_wait_in_the_schedule(task_app: App) -> None:
    flow = chain(tasks.add.s(1, 1), tasks.add.s(1).set(countdown=0.2)).delay()
    drain(task_app, timeout_s=20)
    view = task_app.records.flow_view(flow.queue, flow.id)
    assert view.steps[1].state in ("scheduled", "waiting")
    drain(task_app, timeout_s=20, wait_for_retries=True)
    assert flow.result(timeout=1) == 3


def test_binary_results_pass_unchanged(task_app: App) -> None:
    flow = chain(tasks.returns_bytes.s(3), tasks.tag.s("bytes")).delay()
    drain(task_app, timeout_s=20)
    assert flow.result(timeout=1) == ["bytes", b"xxx"]


def test_eager_mode_runs_workflows_inline(make_app: Callable[..., App]) -> None:
    app = make_app(eager=True)
    add = app.task(name="wf.add", store_result=True)(lambda a, b: a + b)
    total = app.task(name="wf.total")(lambda xs: sum(xs))
    assert chain(add.s(1, 2), add.s(3)).delay().result() == 6
    assert group(add.s(i, i) for i in range(3)).delay().result() == [0, 2, 4]
    assert chord(group(add.s(i, 1) for i in range(3)), total.s()).delay().result() == 6
    assert add.apply_async((1, 1), link=add.s(5)).result() == 2


def test_cli_shows_a_workflow(task_app: App) -> None:
    flow = chain(tasks.add.s(1, 2), tasks.fails_stored.s(), tasks.add.s(1)).delay()
    drain(task_app, timeout_s=20)
    url = task_app.settings.redis_url
    out = CliRunner().invoke(main, ["-A", "tests.tasks", "--redis-url", url, "job", flow.id])
    assert out.exit_code == 1, out.output
    assert f"chain {flow.id}" in out.output
    assert "1. tests.tasks.add" in out.output and "succeeded -> 3" in out.output
    assert "not run: tests.tasks.fails_stored failed: KeyError" in out.output
    data = json.loads(
        CliRunner()
        .invoke(main, ["-A", "tests.tasks", "--redis-url", url, "job", flow.id, "--json"])
        .output
    )
    assert [s["state"] for s in data["steps"]] == ["succeeded", "failed", "failed"]


def test_workflow_keys_expire(task_app: App, r: redis.Redis) -> None:
    chain(tasks.add.s(1, 1), tasks.add.s(1)).delay()
    chord(group(tasks.square.s(i) for i in range(3)), tasks.collect.s()).delay()
    drain(task_app, timeout_s=20)
    keys = [k for k in r.keys("tasks:*") if b":job:" in k or b":done:" in k or b":flow:" in k]
    assert keys and all(r.pttl(k) > 0 for k in keys)


def test_a_worker_names_body_keys_it_does_not_know(
    task_app: App, r: redis.Redis, caplog: pytest.LogCaptureFixture
) -> None:
    body = msgpack.packb({"v": 1, "id": "j1", "task": "tests.tasks.echo", "args": [1], "zz": 1})
    r.xadd("tasks:normal", {"task": "tests.tasks.echo", "body": body})
    with caplog.at_level("WARNING", logger="taskq.bodycheck"):
        assert drain(task_app).ok == 1
    assert "zz" in caplog.text and "does not know" in caplog.text


@pytest.mark.slow
def test_a_chord_of_10000_runs_its_body_once_and_leaves_no_state(
    task_app: App, r: redis.Redis
) -> None:
    # given a warmed-up Redis (scripts loaded, streams and groups made)
    warm = chord(group(tasks.square.s(i) for i in range(10)), tasks.tsum.s()).delay()
    drain(task_app, timeout_s=20)
    assert warm.result(timeout=1) == sum(i * i for i in range(10))
    r.delete("runs")
    keys_before = set(r.keys())
    baseline = int(r.info("memory")["used_memory"])
    # when a 10,000-job chord runs to its end
    c = chord(group(tasks.square.s(i) for i in range(10_000)), tasks.tsum.s()).delay()
    peak = int(r.info("memory")["used_memory"])
    drain(task_app, timeout_s=120)
    assert c.result(timeout=1) == sum(i * i for i in range(10_000))
    # then its body ran once, and Redis holds no more than the steps' records (each header
    # job's and the body's, as the task stores results: all with a TTL) and the flow's
    [body] = _tags(r, "tsum")
    assert body["n"] == 10_000
    r.delete("runs")
    assert not r.keys("tasks:chord:*")
    records = list(set(r.keys()) - keys_before)
    assert len(records) == 10_002  # (the flow's record lists its steps)
    assert all(k.startswith((b"tasks:job:", b"tasks:flow:")) for k in records)
    assert all(ttl > 0 for ttl in _ttls(r, records))
    r.delete(*records)
    after = int(r.info("memory")["used_memory"])
    assert peak - baseline > 1_000_000  # the waiting header jobs were real data
    # (the keyspace's tables grew to 16,384 buckets for the records; Redis shrinks them later)
    assert after - baseline < 64 * 1024 + 2 * 16_384 * 8, (baseline, peak, after)


def _ttls(r: redis.Redis, keys: list[bytes]) -> list[int]:
    pipe = r.pipeline(transaction=False)
    for key in keys:
        pipe.pttl(key)
    return list(pipe.execute())


def _chord_key(r: redis.Redis) -> bytes:
    [key] = r.keys("tasks:chord:*")
    return bytes(key)


def test_a_rewritten_chord_state_runs_nothing_it_names(task_app: App, r: redis.Redis) -> None:
    # given a chord under way, and its stored body op rewritten by whoever may write the
    # queue into an op that would delete the schedule
    r.zadd("tasks:schedule", {"a delayed job": 2**45})
    c = chord(group(tasks.square.s(i) for i in range(2)), tasks.collect.s()).apply_async()
    key = _chord_key(r)
    r.hset(key, "op", msgpack.packb(["chord_fail", "tasks:schedule", []]))
    # when the header runs
    result = drain(task_app, timeout_s=20)
    # then the header jobs succeed, and the rewritten state runs nothing
    assert [o.kind for o in result.of_task("tests.tasks.square")] == [OK] * 2
    assert r.zcard("tasks:schedule") == 1
    assert not _tags(r, "collect") and r.exists(key)
    assert c.status().state == "pending"


def test_a_body_naming_a_foreign_key_is_dead_lettered_untouched(
    task_app: App, r: redis.Redis
) -> None:
    # given a job that would end a chord named 'tasks:schedule' and fail a record
    # 'tasks:workers' when it fails
    r.zadd("tasks:schedule", {"a delayed job": 2**45})
    r.zadd("tasks:workers", {"w": 1})
    ref = ["tasks:workers", "tasks:done:x", 1000]
    wf = {"abort": [{"key": "tasks:schedule", "fail": [ref], "errback": []}]}
    body = {"v": 1, "id": "hostile", "task": "tests.tasks.fails_stored", "args": ["x"], "wf": wf}
    r.xadd("tasks:normal", {"task": "tests.tasks.fails_stored", "body": msgpack.packb(body)})
    # when a worker takes it
    drain(task_app, timeout_s=10)
    # then it never runs: it is dead-lettered with the reason, and nothing it named changed
    [(_, dead)] = r.xrange("tasks:deadletter")
    assert b"is not a chord key" in dead[b"error"]
    assert r.zcard("tasks:schedule") == 1 and r.zrange("tasks:workers", 0, -1) == [b"w"]
    assert not _tags(r, "fails_stored")
