"""Partitioned queues on one server: producers spread jobs, workers read every partition with
strict priority across them (the bound of taskq.broker.partitioned)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

import pytest

from taskq import App
from taskq.errors import ConfigError
from taskq.testing import drain

pytestmark = pytest.mark.integration

PARTS = ("{tasks.0}", "{tasks.1}", "{tasks.2}")


def test_jobs_spread_round_robin_or_by_key_and_all_run(make_app: Callable[..., App]) -> None:
    app = make_app(partitions={"tasks": 3})
    ran: list[tuple[str, int]] = []
    t = app.task(name="t")(lambda k, i: ran.append((k, i)))
    jobs = [t.delay("rr", i) for i in range(6)]
    assert Counter(j.queue for j in jobs) == {q: 2 for q in PARTS}
    keyed = [t.apply_async(("user-7", i), partition_key="user-7") for i in range(5)]
    assert len({j.queue for j in keyed}) == 1
    bulk = t.starmap(("bulk", i) for i in range(3))
    assert {j.queue for j in bulk} == set(PARTS)
    result = drain(app, queues=["tasks"])
    assert len(result.outcomes) == 14
    assert [i for k, i in ran if k == "user-7"] == list(range(5))  # one partition: in order


def test_no_lower_priority_job_starts_while_a_partition_has_a_higher_one(
    make_app: Callable[..., App],
) -> None:
    app = make_app(partitions={"tasks": 3})
    order: list[str] = []
    t = app.task(name="t")(lambda tag: order.append(tag))
    for i in range(3):  # normal jobs on every partition, then one high job on the last
        t.apply_async((f"normal-{i}",), partition_key=f"k{i}")
    high_key = next(f"h{i}" for i in range(100) if app.get_task("t").message(
        (), {}, partition_key=f"h{i}").queue == PARTS[2])  # fmt: skip
    t.apply_async(("high",), priority="high", partition_key=high_key)
    low_key = next(f"l{i}" for i in range(100) if app.get_task("t").message(
        (), {}, partition_key=f"l{i}").queue == PARTS[0])  # fmt: skip
    t.apply_async(("low",), priority="low", partition_key=low_key)
    broker = app.broker_for(["tasks"])
    broker.ensure_groups()
    got = []
    acks: list = []
    while True:
        fetched = broker.fetch("c1", 1, acks)
        if not fetched.deliveries:
            break
        assert len(fetched.deliveries) == 1
        got.append(fetched.deliveries[0].priority)
        acks = fetched.deliveries
    assert got[0] == "high" and got[-1] == "low" and got.count("normal") == 3


def test_bad_partitions_are_refused(make_app: Callable[..., App]) -> None:
    with pytest.raises(ConfigError, match="int >= 1"):
        make_app(partitions={"tasks": 0})
    with pytest.raises(ConfigError, match="invalid queue name"):
        make_app(partitions={"a:b": 2})
