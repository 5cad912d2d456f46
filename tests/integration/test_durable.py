"""``durable_enqueue``: an enqueue returns once a replica confirmed the job (``WAIT 1``)."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import redis

from taskq import App
from taskq.errors import BrokerUnavailable

pytestmark = pytest.mark.integration


def test_without_a_replica_an_enqueue_says_it_is_unconfirmed(
    make_app: Callable[..., App], r: redis.Redis
) -> None:
    app = make_app(durable_enqueue=True, durable_enqueue_timeout_ms=50)
    note = app.task(name="note")(lambda *_: None)
    with pytest.raises(BrokerUnavailable, match="no replica confirmed it within 50 ms") as caught:
        note.delay()
    assert caught.value.timed_out  # "may or may not have been enqueued": it is, unconfirmed
    assert r.xlen("tasks:normal") == 1
    with pytest.raises(BrokerUnavailable, match="no replica confirmed"):
        note.map(range(3))
    assert r.xlen("tasks:normal") == 4
    assert make_app().task(name="plain")(lambda: None).delay().id  # off: no WAIT
