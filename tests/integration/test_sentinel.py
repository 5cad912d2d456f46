"""taskq behind Sentinel: a ``redis+sentinel://`` URL finds the master, and a worker survives
the master's SIGKILL mid-drain (the sentinels promote the replica; reconnects find it)."""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path

import pytest

from taskq.broker import connect
from taskq.errors import BrokerUnavailable
from tests import cluster_tasks
from tests.conftest import FAST_SETTINGS, WorkerProcess, wait_until
from tests.topologies import Sentinels, sentinels_fixture

pytestmark = [pytest.mark.slow, pytest.mark.integration]
__all__ = ["sentinels_fixture"]  # the ``sentinels`` fixture

JOBS = 400


def counts() -> Counter[str]:
    """How many times each job ran (the tasks' own log)."""
    rows = cluster_tasks.app.link.call("LRANGE", cluster_tasks.RUNS, 0, -1)
    return Counter(x.decode().split("|")[0] for x in rows)


def test_a_drain_survives_a_master_sigkill(sentinels: Sentinels, tmp_path: Path) -> None:
    app = cluster_tasks.configure(sentinels.url, **FAST_SETTINGS)
    env = {f"TASKQ_{k.upper()}": str(v) for k, v in FAST_SETTINGS.items()}
    try:
        # given jobs on the master, replicated
        cluster_tasks.slow_note.starmap((i, 0.01) for i in range(JOBS))
        assert app.link.call("WAIT", 1, 5000) == 1
        worker = WorkerProcess(
            sentinels.url, "-A", "tests.cluster_tasks:app", "-c", "2",
            log_path=tmp_path / "worker.log", **env,
        )  # fmt: skip
        try:
            # when the master is SIGKILLed while a worker drains them
            wait_until(lambda: sum(counts().values()) >= JOBS // 4, 30)
            old = sentinels.kill_master()
            started = time.monotonic()
            sentinels.wait_for_failover()
            failover_s = time.monotonic() - started
            # then every job runs (after the promotion, on the new master)
            wait_until(lambda: len(counts()) >= JOBS, 60)
        finally:
            worker.stop()
        seen = counts()
        lost = JOBS - len(seen)
        duplicates = sum(seen.values()) - len(seen)
        print(f"sentinel failover {failover_s:.1f}s: lost {lost}, duplicates {duplicates}")
        assert lost == 0
        assert duplicates <= 2 * 2  # at least once: at most the jobs in flight at the kill
        assert "Traceback" not in worker.output()
        sentinels.restart_old_master(as_replica=True)
        assert old.alive
    finally:
        app.link.call("FLUSHALL")
        app.close()


def test_an_unknown_master_name_is_a_one_line_error(sentinels: Sentinels) -> None:
    url = sentinels.url.replace(f"/{sentinels.master_name}/", "/nosuch/")
    with pytest.raises(BrokerUnavailable, match="name no reachable master"):
        connect(url).call("PING")
