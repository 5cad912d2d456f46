"""Fair queues without Redis: which jobs carry a fairness key, its checks, and the partition
a fair queue's job goes to (docs/fairness.md)."""

from __future__ import annotations

import pytest

from taskq import App
from taskq.broker.enqueue import publish_command
from taskq.errors import ConfigError
from taskq.keys import check_fair_key
from taskq.partitions import partition_of


def test_a_job_of_a_fair_queue_carries_its_key_and_others_none() -> None:
    app = App(fair_queues=["fair"])
    keyed = app.task(name="k", queue="fair", fair_key=lambda tenant: f"t-{tenant}")(lambda t: t)
    plain = app.task(name="p")(lambda: None)
    assert keyed.message((3,), {}).fair_key == "t-3"
    assert keyed.message((3,), {}, fair_key="mine").fair_key == "mine"
    assert app.task(name="d", queue="fair")(lambda: None).message((), {}).fair_key == "default"
    assert plain.message((), {}, fair_key="ignored").fair_key is None
    assert publish_command(plain.message((), {}), b"b")[0] == "XADD"  # a plain queue's XADD
    assert publish_command(keyed.message((3,), {}), b"b")[0] == "EVALSHA"


@pytest.mark.parametrize("key", ["", "a b", "x" * 201, "tab\t", "nl\n", 7])
def test_a_bad_fairness_key_is_refused(key: object) -> None:
    with pytest.raises(ConfigError, match="fair_key"):
        check_fair_key(key)
    app = App(fair_queues=["fair"])
    t = app.task(name="k", queue="fair")(lambda: None)
    with pytest.raises(ConfigError, match="fair_key"):
        t.message((), {}, fair_key=key)  # type: ignore[arg-type]


def test_a_fair_key_option_must_be_a_function() -> None:
    app = App()
    with pytest.raises(ConfigError, match="fair_key must be a function"):
        app.task(name="k", fair_key="tenant")(lambda: None)  # type: ignore[arg-type]


def test_a_fair_partitioned_queue_places_a_job_by_its_fairness_key() -> None:
    app = App(partitions={"fair": 4}, fair_queues=["fair"])
    t = app.task(name="k", queue="fair", fair_key=lambda tenant: tenant)(lambda t: t)
    for tenant in ("a", "b", "c", "tenant-42"):
        expected = partition_of(app.settings.partitions, "fair", tenant)
        assert {t.message((tenant,), {}).queue for _ in range(5)} == {expected}
    # an explicit partition key still wins
    assert t.message(("a",), {}, partition_key="z").queue == partition_of(
        app.settings.partitions, "fair", "z"
    )


def test_weights_are_whole_numbers_from_one_to_a_thousand() -> None:
    app = App()
    for bad in (0, 1001, 2.5, True):
        with pytest.raises(ConfigError, match="whole number 1 to 1000"):
            app.set_fair_weight("tasks", "k", bad)  # type: ignore[arg-type]
