"""A master of a real Redis Cluster SIGKILLed under load: its replica is promoted, a producer and
a worker carry on by themselves, and the jobs lost and run twice are counted, with and without
``durable_enqueue``."""

from __future__ import annotations

import threading
import time
from collections import Counter
from pathlib import Path

import pytest

from taskq import App
from taskq.errors import BrokerError
from tests import cluster_tasks
from tests.conftest import FAST_SETTINGS, WorkerProcess, wait_until
from tests.topologies import RedisCluster, redis_cluster_fixture

pytestmark = [pytest.mark.slow, pytest.mark.integration]
__all__ = ["redis_cluster_fixture"]  # the ``redis_cluster`` fixture

PRODUCE_S = 7.0
KILL_AFTER_S = 2.0


class Producer(threading.Thread):
    """Enqueues job after job for PRODUCE_S; remembers which enqueues were acknowledged."""

    def __init__(self, app: App, queue: str) -> None:
        super().__init__(daemon=True)
        self.app, self.queue = app, queue
        self.acked: set[int] = set()
        self.failed: list[str] = []
        self.longest_s = 0.0

    def run(self) -> None:
        deadline, i = time.monotonic() + PRODUCE_S, 0
        while time.monotonic() < deadline:
            i += 1
            msg = cluster_tasks.note.message((i,), {}, queue=self.queue)
            started = time.monotonic()
            try:
                self.app.enqueue(msg)
            except BrokerError as exc:  # unknown whether it went in: not counted as acked
                self.failed.append(str(exc)[:120])
                time.sleep(0.05)
                continue
            finally:
                self.longest_s = max(self.longest_s, time.monotonic() - started)
            self.acked.add(i)


def ran(app: App) -> Counter[int]:
    rows = app.link.call("LRANGE", cluster_tasks.RUNS, 0, -1)
    return Counter(int(x.decode().split("|")[0]) for x in rows)


def test_failover_under_load(redis_cluster: RedisCluster, tmp_path: Path) -> None:
    # The jobs' queue on one master, the runs log (the count) on another.
    runs_master = redis_cluster.master_of(cluster_tasks.RUNS)
    queue = next(
        f"{{fo{i}}}"
        for i in range(500)
        if redis_cluster.master_of(f"{{fo{i}}}:high") is not runs_master
    )
    report = [one_failover(redis_cluster, queue, durable, tmp_path) for durable in (False, True)]
    print("\n".join(report))


def one_failover(cluster: RedisCluster, queue: str, durable: bool, tmp_path: Path) -> str:
    env = {f"TASKQ_{k.upper()}": str(v) for k, v in FAST_SETTINGS.items()}
    app = App(cluster.url, queue, durable_enqueue=durable, **FAST_SETTINGS)
    worker = WorkerProcess(
        cluster.url, "-A", "tests.cluster_tasks:app", "-Q", queue, "-c", "2",
        log_path=tmp_path / f"worker-{durable}.log", **env,
    )  # fmt: skip
    producer = Producer(app, queue)
    try:
        # given a producer and a worker at work
        producer.start()
        time.sleep(KILL_AFTER_S)
        # when the queue's master is SIGKILLed
        killed = cluster.kill_master_of(f"{queue}:high")
        started = time.monotonic()
        cluster.wait_for_failover(f"{queue}:high")
        failover_s = time.monotonic() - started
        producer.join(PRODUCE_S + 30)
        # then every acknowledged job runs, unless it was lost with the master (counted)
        settle_until = time.monotonic() + 25
        wait_until(lambda: producer.acked <= set(ran(app)) or time.monotonic() > settle_until, 30)
    finally:
        worker.stop()
    runs = ran(app)
    lost = len(producer.acked - set(runs))
    duplicates = sum(n - 1 for i, n in runs.items() if i in producer.acked)
    line = (
        f"durable_enqueue={durable}: {len(producer.acked)} acked, {len(producer.failed)} "
        f"enqueues raised, failover {failover_s:.1f}s, longest enqueue "
        f"{producer.longest_s:.1f}s, lost {lost}, duplicates {duplicates}"
    )
    assert "Traceback" not in worker.output(), worker.output()[-3000:]
    if durable:
        assert lost == 0, line
    app.link.call("FLUSHALL")
    app.close()
    cluster.restart(killed)  # it rejoins as a replica of its successor
    return line
