"""Typed arguments and results through a real Redis and real worker processes: the
extension types, dataclasses and pydantic models, in jobs, workflows and signed bodies."""

from __future__ import annotations

import asyncio
import datetime as dt
import uuid
from collections.abc import Callable
from decimal import Decimal
from typing import Any
from zoneinfo import ZoneInfo

import msgpack
import pytest
import redis

from taskq import App, EnqueueError, chain, chord
from taskq.bodypatch import is_signed
from taskq.testing import drain
from tests import typed_tasks as tt
from tests.conftest import WorkerProcess, wait_until

pytestmark = pytest.mark.integration

NEW_YORK = ZoneInfo("America/New_York")
ORDER = tt.Order(
    7,
    dt.datetime(2026, 11, 1, 1, 30, tzinfo=NEW_YORK, fold=1),
    (tt.Line("a", Decimal("9.90")), tt.Line("b", Decimal("-0.00"))),
    tt.Size.LARGE,
)
CUSTOMER = tt.Customer(name="ada", since=dt.date(2020, 2, 29), orders=[ORDER])
VALUES = (
    dt.datetime(2026, 3, 8, 1, 59, 59, 999_999, tzinfo=NEW_YORK),
    dt.datetime(2026, 1, 1, 12),
    dt.time(23, 59, tzinfo=dt.timezone(dt.timedelta(hours=-3))),
    dt.timedelta(days=-1, seconds=5),
    Decimal("-0.00"),
    Decimal("1E+40"),
    uuid.UUID(int=2**128 - 1),
    (1, (2, "three")),
    {"x", "y"},
    frozenset({1}),
    tt.Size.SMALL,
    2**100,
    [{"nested": (dt.date(1999, 12, 31), {Decimal("0.1")})}],
)


@pytest.fixture
def app(redis_url: str) -> App:
    tt.app.settings = tt.app.settings.replace(redis_url=redis_url)
    return tt.app


def _worker(start_worker: Callable[..., WorkerProcess], *args: str, **env: str) -> None:
    start_worker("-A", "tests.typed_tasks", "-c", "1", "--loglevel", "warning", *args, **env)


@pytest.mark.slow
def test_values_dataclasses_and_models_round_trip_through_a_worker(
    app: App, start_worker: Callable[..., WorkerProcess]
) -> None:
    echoed = tt.echo.delay(*VALUES, when=VALUES[0], big=-(2**80))
    totalled = tt.total.delay(ORDER, customer=CUSTOMER)
    flow = chain(tt.total.s(ORDER, CUSTOMER), tt.first_line.s()).delay()
    chorded = chord([tt.first_line.s(ORDER)] * 2, tt.prices.s()).delay()
    _worker(start_worker)
    args, kwargs, seen = echoed.result(timeout=30)
    assert tuple(args) == VALUES and kwargs == {"when": VALUES[0], "big": -(2**80)}
    assert seen == [type(v).__name__ for v in VALUES] + ["datetime", "int"]
    assert args[0].tzinfo is NEW_YORK and args[0].utcoffset() == dt.timedelta(hours=-5)
    assert str(args[4]) == "-0.00" and str(args[5]) == "1E+40"
    result = totalled.result(timeout=30)
    assert isinstance(result, tt.Order) and result.lines[-1] == tt.Line("total", Decimal("9.90"))
    assert result.placed.fold == 1 and result.placed.tzinfo is NEW_YORK
    assert flow.result(timeout=30) == tt.Line("a", Decimal("9.90"))
    assert chorded.result(timeout=30) == [Decimal("9.90")] * 2


def test_signed_bodies_with_extension_types_run(app: App, r: redis.Redis) -> None:
    app.settings = app.settings.replace(signing_keys=("k1",))
    try:
        job = tt.echo.delay(Decimal("1.10"), (1,))
        assert is_signed(r.xrange("tasks:normal")[0][1][b"body"])
        drain(app)
        assert job.result(timeout=10)[0] == [Decimal("1.10"), (1,)]
    finally:
        app.settings = app.settings.replace(signing_keys=())


def test_an_unknown_extension_code_is_dead_lettered_with_its_reason(
    app: App, r: redis.Redis
) -> None:
    body = msgpack.packb(
        {
            "v": 2,
            "id": "newer1",
            "task": "tests.typed_tasks.echo",
            "args": [msgpack.ExtType(99, b"?")],
        }
    )
    r.xadd("tasks:normal", {"task": "tests.typed_tasks.echo", "body": body})
    drain(app)
    dead = [
        {k.decode(): v.decode(errors="replace") for k, v in fields.items()}
        for _, fields in r.xrange("tasks:deadletter")
    ]
    assert len(dead) == 1 and "unknown msgpack extension type 99" in dead[0]["error"]
    wait_until(lambda: r.xlen("tasks:normal") == 0)


def test_the_async_producer_checks_and_carries_the_same_values(app: App) -> None:
    async def send() -> Any:
        with pytest.raises(EnqueueError, match="missing a required argument: 'customer'"):
            await tt.total.adelay(ORDER)
        return await tt.echo.adelay(ORDER.placed, (Decimal("2.5"),))

    job = asyncio.run(send())
    drain(app)
    args, _, seen = job.result(timeout=10)
    assert args == [ORDER.placed, (Decimal("2.5"),)] and seen == ["datetime", "tuple"]
