"""taskq on a real 6-node Redis Cluster: everything one server does, one hash slot per call.

The cluster itself refuses any script that touches a key outside the slot of its declared
keys, so every scenario here also checks that the scripts it runs declare their keys.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from taskq import App, chain, chord, current_job, group
from taskq.broker import connect
from taskq.broker import link as link_module
from taskq.broker.fairness import claim_fairness, fair_off
from taskq.broker.scripts import script_sha
from taskq.broker.slots import slot_runs
from taskq.errors import BrokerUnavailable, ConfigError
from taskq.partitions import partition_of
from taskq.testing import drain
from tests.conftest import FAST_SETTINGS, ROOT, WorkerProcess, wait_until
from tests.redis_server import RedisServer
from tests.topologies import RedisCluster, free_ports, redis_cluster_fixture, slot_of

pytestmark = [pytest.mark.slow, pytest.mark.integration]
__all__ = ["redis_cluster_fixture"]  # the ``redis_cluster`` fixture


def two_queues_apart(cluster: RedisCluster) -> tuple[str, str]:
    """Two hash-tagged queue names whose keys live on different masters."""
    first = "{qa}"
    node = cluster.master_of(f"{first}:high")
    other = next(f"{{q{i}}}" for i in range(500) if cluster.master_of(f"{{q{i}}}:high") is not node)
    return first, other


@pytest.fixture
def capp(redis_cluster: RedisCluster) -> Iterator[Callable[..., App]]:
    apps: list[App] = []

    def make(queue: str = "{tasks}", **settings: Any) -> App:
        app = App(redis_cluster.url, queue, **{**FAST_SETTINGS, **settings})
        apps.append(app)
        return app

    yield make
    for app in apps:
        app.link.call("FLUSHALL")
        app.close()


def test_a_worker_on_queues_in_two_slots_calls_each_slot_and_keeps_priority(
    redis_cluster: RedisCluster, capp: Callable[..., App]
) -> None:
    a, b = two_queues_apart(redis_cluster)
    assert slot_of(f"{a}:high") != slot_of(f"{b}:high")
    app = capp(a)
    order: list[str] = []
    low = app.task(name="low", queue=b, priority="low")(lambda v: order.append(v))
    norm = app.task(name="norm", queue=a)(lambda v: order.append(v))
    high = app.task(name="high", queue=a, priority="high")(lambda v: order.append(v))
    for i in range(3):
        low.delay(f"b-low-{i}")
        norm.delay(f"a-normal-{i}")
    high.delay("a-high")
    assert slot_runs(app.link, [a, b]) == [(a,), (b,)]
    result = drain(app, queues=[a, b])
    assert len(result.outcomes) == 7
    assert order == [
        "a-high",
        *(f"a-normal-{i}" for i in range(3)),
        *(f"b-low-{i}" for i in range(3)),
    ]


def test_one_job_fetches_across_slots_keep_the_queue_order(
    redis_cluster: RedisCluster, capp: Callable[..., App]
) -> None:
    a, b = two_queues_apart(redis_cluster)
    app = capp(a)
    t = app.task(name="t")(lambda: None)
    for _ in range(3):
        app.enqueue(t.message((), {}, queue=b))
    broker = app.broker_for([a, b])
    broker.ensure_groups()
    # given a worker taking b's jobs one at a time (a is empty: read in the same round)
    first = broker.fetch("c", 1).deliveries
    assert [d.queue for d in first] == [b]
    second = broker.fetch("c", 1, first).deliveries
    assert [d.queue for d in second] == [b]
    # when a low-priority job arrives on a, then it comes first (b's, if read, comes after)
    app.enqueue(t.message((), {}, queue=a, priority="low"))
    got = broker.fetch("c", 1, second).deliveries
    assert got[0].queue == a and all(d.queue == b for d in got[1:])


def test_a_partitioned_queue_spreads_over_the_masters(
    redis_cluster: RedisCluster, capp: Callable[..., App]
) -> None:
    app = capp("{tasks}", partitions={"work": 4}, store_results=True)
    names = [f"{{work.{i}}}" for i in range(4)]
    assert len({redis_cluster.master_of(f"{n}:high").port for n in names}) >= 2
    t = app.task(name="w", queue="work")(lambda i: i)
    jobs = t.starmap((i,) for i in range(8))
    urgent = t.apply_async((99,), priority="high", partition_key="k")
    assert {j.queue for j in jobs} == set(names)
    broker = app.broker_for(["work"])
    broker.ensure_groups()
    first = broker.fetch("c1", 1).deliveries
    assert [d.priority for d in first] == ["high"] and first[0].queue == urgent.queue
    broker.fetch("c1", 0, first)  # ack it (its record stays running: this is no worker)
    result = drain(app, queues=["work"], timeout_s=20)
    assert len(result.outcomes) == 8 and jobs[3].result(timeout=2) == 3


def test_retries_dead_letters_delays_and_results(capp: Callable[..., App]) -> None:
    app = capp("{tasks}", store_results=True, durable_enqueue=True)
    tries: list[int] = []

    @app.task(max_retries=2)
    def flaky(n: int) -> int:
        tries.append(n)
        if len(tries) < 3:
            raise RuntimeError("not yet")
        return n * 2

    @app.task(max_retries=0)
    def broken() -> None:
        raise ValueError("for good")

    @app.task
    def later(x: int) -> int:
        return x + 1

    job = flaky.delay(21)
    dead = broken.delay()
    delayed = later.apply_async((1,), countdown=0.3)
    result = drain(app, wait_for_retries=True, timeout_s=20)
    assert job.result(timeout=2) == 42 and len(tries) == 3
    assert delayed.result(timeout=2) == 2
    assert dead.status().state == "failed"
    [entry] = app.reader.deadletters("{tasks}", count=10)
    assert entry.error_type == "ValueError"
    assert len(result.outcomes) == 5
    snapshot = app.reader.queue("{tasks}")
    assert snapshot.dead == 1 and snapshot.scheduled == 0


def test_workflows_under_one_hash_tag_and_a_clear_error_across_tags(
    capp: Callable[..., App],
) -> None:
    app = capp("{app}.main", store_results=True)
    add = app.task(name="add")(lambda a, b: a + b)
    total = app.task(name="total", queue="{app}.other")(lambda xs: sum(xs))
    flow = chain(add.s(1, 2), add.s(10)).apply_async()
    both = chord(group(add.s(i, i) for i in range(4)), total.s()).apply_async()
    drain(app, queues=["{app}.main", "{app}.other"], timeout_s=20)
    assert flow.result(timeout=2) == 13
    assert both.result(timeout=2) == 12
    elsewhere = app.task(name="elsewhere", queue="{zzz}")(lambda x: x)
    with pytest.raises(ConfigError, match="hash slots"):
        chain(add.s(1, 1), elsewhere.s()).apply_async()


def test_periodic_jobs_and_limits(capp: Callable[..., App]) -> None:
    app = capp("{tasks}")
    ran: list[float] = []
    app.add_periodic(app.task(name="tick")(lambda: ran.append(time.time())), every=1)
    limited = app.task(name="limited", rate_limit="2/s")(lambda: ran.append(-1.0))
    one_at_a_time = app.task(name="solo", concurrency_limit=1)(lambda: ran.append(-2.0))
    for _ in range(3):
        limited.delay()
        one_at_a_time.delay()
    from taskq.broker.schedules import Schedules
    from taskq.worker.ticker import Ticker

    ticker, schedules = Ticker(app, ["{tasks}"]), Schedules(app.link)

    def ticked() -> bool:
        ticker.step(schedules)
        return app.reader.queue("{tasks}").streams[1].waiting > 6

    wait_until(ticked, 5)  # the first step registers the schedule; the next tick enqueues
    drain(app, wait_for_retries=True, timeout_s=20)
    assert ran.count(-1.0) == 3 and ran.count(-2.0) == 3
    assert any(t > 0 for t in ran)  # the periodic tick's job


def test_unique_jobs_and_cancel(capp: Callable[..., App]) -> None:
    app = capp("{tasks}", store_results=True)
    once = app.task(name="once", unique=True, unique_for_s=60)(lambda x: x)
    first, second = once.delay(1), once.delay(1)
    assert first.id == second.id
    victim = app.task(name="victim")(lambda: None).apply_async(countdown=30)
    assert victim.cancel() in ("cancelled", True)
    drain(app)
    assert first.result(timeout=2) == 1
    assert victim.status().state == "cancelled"


def run_cli(url: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TASKQ_")}
    env.update(PYTHONPATH=str(ROOT), TASKQ_REDIS_URL=url)
    cmd = [sys.executable, "-m", "taskq", "-A", "tests.cluster_tasks:app", *args]
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=60, cwd=ROOT)


def cluster_worker(url: str, tmp_path: Path, *args: str) -> WorkerProcess:
    env = {f"TASKQ_{k.upper()}": str(v) for k, v in FAST_SETTINGS.items()}
    env["TASKQ_PARTITIONS"] = "work=3"
    log = tmp_path / f"worker-{time.monotonic_ns()}.log"
    return WorkerProcess(url, "-A", "tests.cluster_tasks:app", *args, log_path=log, **env)


def runs_of(app: App) -> list[str]:
    return [x.decode() for x in app.link.call("LRANGE", "{runs}:log", 0, -1)]


def test_crash_recovery_inspect_and_deadletter_cli(
    redis_cluster: RedisCluster, tmp_path: Path
) -> None:
    from tests import cluster_tasks

    app = cluster_tasks.configure(redis_cluster.url, **FAST_SETTINGS)
    try:
        # given jobs, and a worker SIGKILLed while it runs them
        for i in range(20):
            cluster_tasks.slow_note.delay(i, 0.2)
        cluster_tasks.always_fails.delay("x")
        w = cluster_worker(redis_cluster.url, tmp_path, "-c", "2")
        wait_until(lambda: len(runs_of(app)) >= 2, 20)
        w.kill_all()
        w.log.close()
        # when another worker starts, then every job has run (the lost ones after the sweep)
        w2 = cluster_worker(redis_cluster.url, tmp_path, "-c", "2")
        try:
            done = lambda: {int(r.split("|")[0]) for r in runs_of(app) if r[0].isdigit()}  # noqa: E731
            wait_until(lambda: done() == set(range(20)), 40)
            wait_until(lambda: app.reader.deadletter_count("{ctasks}") == 1, 20)
            inspected = run_cli(redis_cluster.url, "inspect", "--json")
            assert inspected.returncode == 0, inspected.stderr
            assert "{ctasks}" in json.dumps(json.loads(inspected.stdout))
            listed = run_cli(redis_cluster.url, "deadletter", "list", "--json")
            assert listed.returncode == 0 and "always_fails" in listed.stdout, listed.stderr
            retried = run_cli(redis_cluster.url, "deadletter", "retry", "--all")
            assert retried.returncode == 0, retried.stderr + retried.stdout
            wait_until(lambda: app.reader.deadletter_count("{ctasks}") == 1, 20)
            wait_until(lambda: sum(r.startswith("x|") for r in runs_of(app)) == 4, 20)
        finally:
            w2.stop()
        assert "Traceback" not in w2.output()
    finally:
        app.link.call("FLUSHALL")
        app.close()


def test_a_worker_process_serves_a_partitioned_queue(
    redis_cluster: RedisCluster, tmp_path: Path
) -> None:
    from tests import cluster_tasks

    app = cluster_tasks.configure(redis_cluster.url, partitions={"work": 3}, **FAST_SETTINGS)
    try:
        jobs = [cluster_tasks.note.apply_async((i,), queue="work") for i in range(30)]
        assert len({j.queue for j in jobs}) == 3
        w = cluster_worker(redis_cluster.url, tmp_path, "-Q", "work", "-c", "2")
        try:
            wait_until(lambda: len(runs_of(app)) >= 30, 30)
        finally:
            w.stop()
        assert sorted(int(r.split("|")[0]) for r in runs_of(app)) == list(range(30))
        assert "Traceback" not in w.output()
    finally:
        app.link.call("FLUSHALL")
        app.close()


def test_asyncio_producers_on_the_cluster(capp: Callable[..., App]) -> None:
    import asyncio

    app = capp("{tasks}", store_results=True)
    double = app.task(name="double")(lambda x: 2 * x)

    async def produce() -> list[str]:
        jobs = [await double.adelay(i) for i in range(3)]
        await app.aclose()
        return [j.id for j in jobs]

    ids = asyncio.run(produce())
    drain(app)
    assert [app.job(i, queue="{tasks}").result(timeout=2) for i in ids] == [0, 2, 4]


def test_queue_depth_metrics(capp: Callable[..., App]) -> None:
    pytest.importorskip("prometheus_client")
    from taskq.ops.queue_metrics import QueueDepth

    app = capp("{tasks}")
    note = app.task(name="m")(lambda: None)
    for _ in range(3):
        note.delay()
    families = {m.name: m for m in QueueDepth(app.settings.redis_url, ["{tasks}"]).collect()}
    waiting = [m for m in families.values() if "waiting" in m.name]
    assert waiting and sum(s.value for s in waiting[0].samples) == 3


def test_fair_keys_are_read_from_every_partition(
    redis_cluster: RedisCluster, capp: Callable[..., App]
) -> None:
    from taskq.broker.fairness import recount_fair
    from taskq.fairview import FairKey
    from taskq.keys import QueueKeys, partition_names
    from taskq.ops.inspect import Inspector

    # Given: a partitioned fair queue whose partitions live on different masters.
    app = capp("{tasks}", partitions={"work": 3})
    names = partition_names("work", 3)
    assert len({redis_cluster.master_of(f"{n}:fair:waiting").port for n in names}) >= 2
    for i, name in enumerate(names):
        k = QueueKeys(name)
        app.link.pipeline(
            [("SET", k.fair_mode, "on"), ("ZADD", k.fair_waiting, 50, "a", 9, f"only-{i}"),
             ("RPUSH", k.fair_staged("low", "a"), *["job"] * (i + 1)),
             ("RPUSH", k.fair_staged("high", f"only-{i}"), *["job"] * 9),
             ("HSET", k.fair_weights, "a", 4)]
        )  # fmt: skip
    # Then: app.fair_key sums the partitions; inspect reads each one on its own node.
    assert app.fair_key("work", "a") == FairKey("a", 4, 1 + 2 + 3)
    fair = Inspector(app.reader, names).fair()
    assert {n: (f.active_keys, f.top[0].key, f.top[1]) for n, f in fair.items()} == {
        n: (2, f"only-{i}", FairKey("a", 4, i + 1)) for i, n in enumerate(names)
    }
    # ... and a recount sets each partition's scores to its keys' jobs, on its own node.
    recount_fair(app.link, names)
    assert [app.link.call("ZSCORE", QueueKeys(n).fair_waiting, "a") for n in names] == [
        b"1",
        b"2",
        b"3",
    ]


# -- bad input ---------------------------------------------------------------------------


def test_a_queue_without_a_hash_tag_is_a_one_line_error(redis_cluster: RedisCluster) -> None:
    with pytest.raises(ConfigError, match=r"name it '\{tasks\}'"):
        App(redis_cluster.url, "tasks").broker_for(["tasks"])
    done = run_cli(redis_cluster.url, "worker", "-Q", "plain")
    assert done.returncode != 0
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "hash slots" in lines[0], done.stderr


def test_a_cluster_url_at_a_plain_server_and_the_reverse(
    redis_cluster: RedisCluster, tmp_path: Path
) -> None:
    server = RedisServer(tmp_path / "plain")
    server.start()
    try:
        link = connect(f"redis+cluster://127.0.0.1:{server.port}")
        with pytest.raises(ConfigError, match="not a Redis Cluster"):
            link.call("PING")
    finally:
        server.kill()
    node = redis_cluster.nodes[0]
    plain = App(f"redis://127.0.0.1:{node.port}/0", "{tasks}")
    elsewhere = next(
        f"{{q{i}}}" for i in range(500) if redis_cluster.master_of(f"{{q{i}}}:high") is not node
    )
    with pytest.raises(Exception, match="redis\\+cluster://"):
        plain.link.call("XLEN", f"{elsewhere}:high")
    plain.close()


def test_unreachable_seeds(tmp_path: Path) -> None:
    ports = free_ports(2)
    link = connect(f"redis+cluster://127.0.0.1:{ports[0]},127.0.0.1:{ports[1]}")
    started = time.monotonic()
    with pytest.raises(BrokerUnavailable, match="no seed answered"):
        link.call("PING")
    assert time.monotonic() - started < 10
    done = run_cli(f"redis+cluster://127.0.0.1:{ports[0]}", "inspect", "--json")
    assert done.returncode != 0
    assert len([line for line in done.stderr.splitlines() if line.strip()]) == 1, done.stderr


def test_resumable_steps_and_iterations(capp: Callable[..., App]) -> None:
    import taskq
    from taskq import current_job

    app = capp("{tasks}", store_results=True, retry_backoff_ms=10)
    calls: list[str] = []

    @app.task(max_retries=1)
    def resumable() -> list[Any]:
        value = taskq.step("a", lambda: calls.append("a") or 1)
        rows = list(taskq.iterate("rows", lambda c: ([c or 0, 1], None)))
        job = current_job()
        if job is not None and job.attempt == 1:
            raise RuntimeError("once")
        return [value, rows]

    job = resumable.delay()
    drain(app, wait_for_retries=True, timeout_s=20)
    assert job.result(timeout=2) == [1, []] and calls == ["a"]  # the walk ended in run 1
    status = job.status()
    assert [s.state for s in status.steps] == ["done"] and status.cursors[0].finished


def test_job_telemetry_in_the_queues_slot(capp: Callable[..., App]) -> None:
    app = capp("{tasks}", store_results=True)

    @app.task
    def report(n: int) -> int:
        job = current_job()
        assert job is not None
        for i in range(n):
            job.emit(i)
            job.progress(i + 1, n)
        logging.getLogger("tests.cluster").warning("reported %d", n)
        return n

    job = report.delay(50)
    drain(app)
    assert [c.value for c in job.stream(timeout=10)] == list(range(50))
    progress = job.progress()
    assert progress is not None and progress.done == 50
    assert [r.message for r in job.logs().records] == ["reported 50"]


def test_the_control_plane_and_job_browsing_in_the_queues_slot(capp: Callable[..., App]) -> None:
    """Pause (a fetched job set aside), resume, a run-time limit, a snooze, the audit, and
    the dashboard's actions on jobs and its task statistics, on a cluster."""
    from taskq import Snooze
    from taskq.broker import taskstats
    from taskq.broker.control import read_audit
    from taskq.ops.browse import Jobs

    app = capp("{tasks}", store_results=True)
    runs: list[int] = []

    @app.task(name="c.work")
    def work(n: int) -> int:
        runs.append(n)
        if n == 1 and runs.count(1) == 1:
            raise Snooze(0)
        return n

    app.pause("{tasks}", task="c.work")
    paused = work.delay(0)
    drain(app, timeout_s=5)  # fetched, then set aside under the pause
    assert runs == [] and paused.status().state == "waiting"
    assert app.resume("{tasks}", task="c.work") == 1
    app.set_limit("c.work", rate="100/s", queue="{tasks}")
    snoozing = work.delay(1)
    drain(app, wait_for_retries=True, timeout_s=20)
    assert sorted(runs) == [0, 1, 1] and snoozing.result(timeout=2) == 1
    app.clear_limit("c.work", queue="{tasks}")
    actions = [e.action for e in read_audit(app.broker.link, ["{tasks}"])]
    assert actions[:2] == ["pause", "resume"] and len(actions) == 4

    browse = Jobs(app, "{tasks}")
    waiting = [work.delay(i) for i in range(10, 14)]
    rows = list(browse.page("waiting").rows)
    assert browse.move(rows[:1], "high") == 1
    assert browse.delete("waiting", rows[1:2]) == 1
    assert waiting[1].status().state == "cancelled"
    later = work.apply_async((20,), countdown=3600)
    [row] = browse.page("scheduled").rows
    assert row.job_id == later.id and browse.retry_now("scheduled", [row]) == 1
    taskstats.write(app.broker.link, ["{tasks}"], 60_000, {"c.work": taskstats.Summary(runs=2)})


def test_debounce_batching_and_keep_last(capp: Callable[..., App]) -> None:
    app = capp("{tasks}", store_results=True, signing_keys=["cluster-flow-key-0123456789"])
    echo = app.task(name="echo")(lambda x: x)
    tally = app.task(name="tally", batch_size=3, batch_wait_s=0.2)(
        lambda calls: [c["args"][0] for c in calls]
    )
    burst = [echo.apply_async((i,), debounce_key="k", debounce_s=0.2) for i in range(3)]
    batched = [tally.delay(i) for i in range(4)]  # one full batch, one due after its wait
    kept = [echo.apply_async((i,), unique_key="u", unique_mode="keep_last") for i in (7, 8)]
    assert len({j.id for j in burst}) == 1 and kept[0].id == kept[1].id
    drain(app, wait_for_retries=True, timeout_s=20)
    wait_until(lambda: not app.reader.queue("{tasks}").scheduled, 5)
    drain(app, timeout_s=20)
    assert burst[0].result(timeout=2) == 2
    assert batched[0].result(timeout=2) == [0, 1, 2] and batched[3].result(timeout=2) == [3]
    assert kept[0].result(timeout=2) == 7


def test_a_partitioned_fair_queue_is_fair_within_each_partition(
    capp: Callable[..., App],
) -> None:
    app = capp("{tasks}", partitions={"fair": 3}, fair_queues=["fair"])
    names = [f"{{fair.{i}}}" for i in range(3)]
    claim_fairness(app.link, names, set(names))  # as the queue's first worker does
    tenants = [f"t{i}" for i in range(40)]
    where = {t: partition_of(app.settings.partitions, "fair", t) for t in tenants}
    big = tenants[0]
    small = next(t for t in tenants[1:] if where[t] == where[big])  # sharing its partition
    t = app.task(name="f", queue="fair", fair_key=lambda tenant, n: tenant)(lambda tenant, n: n)
    jobs = t.starmap((big, n) for n in range(20))
    jobs += t.starmap((small, n) for n in range(2))
    others = [x for x in tenants[2:] if where[x] != where[big]][:6]
    jobs += [t.apply_async((x, 0)) for x in others]
    # a unique and a delayed job of the big tenant: staged behind its jobs (in the slot)
    jobs += [t.apply_async((big, 20), unique_key="u"), t.apply_async((big, 21), countdown=0.01)]
    assert {j.queue for j in [*jobs[:22], *jobs[-2:]]} == {where[big]}
    part = app.broker_for([where[big]])
    wait_until(lambda: part.promote(force=True) < 0, message="the delayed job promoted")
    part.ensure_groups()
    # the big tenant's first (admitted as it was enqueued), then the two keys' turns
    first = [d.body for d in part.fetch("c1", 5).deliveries]
    assert len(first) == 5
    small_ids = {j.id for j in jobs[20:22]}
    assert [any(i.encode() in b for i in small_ids) for b in first if b] == [0, 0, 1, 0, 1]
    app.set_fair_weight("fair", big, 2)
    with pytest.raises(ConfigError, match="taskq fair off"):
        claim_fairness(app.link, [where[big]], set())
    assert fair_off(app.link, where[big]) == 22 - 3  # 3 of the big delivered
    claim_fairness(app.link, names, set(names))
    result = drain(app, queues=["fair"], timeout_s=20)
    assert len(result.outcomes) == len(jobs) - 5


def test_records_search_scans_the_node_of_the_queues_hash_tag(
    capp: Callable[..., App], redis_cluster: RedisCluster
) -> None:
    """``taskq jobs search``: SCAN goes to the node that holds the queue's records, whichever
    node that is, and pages through them all."""
    from taskq.ops.jobrows import JobFilter
    from taskq.ops.recordsearch import Records

    first, other = two_queues_apart(redis_cluster)
    for queue in (first, other):
        app = capp(queue, store_results=True)

        @app.task(name="c.find")
        def find(n: int) -> int:
            return n

        jobs = [find.delay(f"order-{i}") for i in range(12)]
        records, cursor, found = Records(app.link, queue), None, []
        while True:
            page = records.page(JobFilter(args="order-1"), cursor=cursor, count=5)
            found += [row.job_id for row in page.rows]
            if page.cursor is None:
                break
            cursor = page.cursor
        assert sorted(found) == sorted([jobs[1].id, jobs[10].id, jobs[11].id])


def test_every_script_ran_on_the_cluster(
    redis_cluster: RedisCluster, capp: Callable[..., App]
) -> None:
    """Runs after the scenarios above: each script they ran was loaded on a master (NOSCRIPT
    then SCRIPT LOAD), and the cluster refuses a script touching a key outside its declared
    keys' slot, so every script that ran declares (or provably shares the slot of) its keys."""
    app = capp("{tasks}")
    note = app.task(name="p")(lambda: None)
    note.delay()
    app.operators.purge_waiting("{tasks}")
    # the hand-back and the end of a job that will not run, straight on the broker
    note.delay()
    note.delay()
    broker = app.broker_for(["{tasks}"])
    broker.ensure_groups()
    first, second = broker.fetch("c1", 2, fence_acks=True).deliveries
    assert first.body is not None and second.body is not None
    assert broker.requeue(first, task="p", body=first.body, owner="c1")
    assert broker.drop(second, owner="c1", state="expired", record_ttl_ms=None)
    # a master's running mark (start.lua), on a job that keeps a record
    kept = app.task(name="r", store_result=True)(lambda: None).delay()
    taken = broker.fetch("c1", 10, fence_acks=True).deliveries
    assert kept.id in {d.record_id for d in taken}
    assert broker.mark_running([("{tasks}", kept.id, "c1", 5)]) == 1
    assert kept.status().state == "running"
    names = sorted(p.stem for p in Path(link_module.__file__).parent.joinpath("lua").glob("*.lua"))
    scripts = [n for n in names if not n.startswith("_")]
    loaded: set[str] = set()
    for node in redis_cluster.live_nodes():
        with node.client() as r:
            exists = r.script_exists(*(script_sha(n) for n in scripts))
        loaded |= {n for n, there in zip(scripts, exists, strict=True) if there}
    assert set(scripts) - loaded == set()
