"""taskq.step / taskq.iterate without Redis: eager mode, bad input, misuse."""

from __future__ import annotations

import asyncio
import datetime as dt
import re
import uuid
from decimal import Decimal
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest

import taskq
from taskq import App, CheckpointError


def test_outside_a_task_each_api_says_so() -> None:
    with pytest.raises(CheckpointError, match=r"taskq.step\(\) is called outside a task"):
        taskq.step("a", lambda: 1)
    with pytest.raises(CheckpointError, match=r"taskq.iterate\(\) is called outside a task"):
        taskq.iterate("rows", lambda c: ([], None))
    with pytest.raises(CheckpointError, match=r"taskq.astep\(\) is called outside a task"):
        asyncio.run(taskq.astep("a", lambda: 1))


def _eager(fn: Any, **settings: Any) -> Any:
    app = App(eager=True, **settings)
    return app.task(fn).delay().result()


def test_a_name_used_twice_in_a_run_is_an_error() -> None:
    def twice() -> None:
        taskq.step("a", lambda: 1)
        taskq.step("a", lambda: 2)

    with pytest.raises(CheckpointError, match="step 'a' is used twice"):
        _eager(twice)


def test_eager_steps_return_what_is_stored_and_iterate_walks_every_page() -> None:
    pages = {None: ([1, 2], "p2"), "p2": ([3], None)}

    def job() -> Any:
        value = taskq.step("t", lambda: (1, "a"))
        return [value, list(taskq.iterate("rows", pages.__getitem__))]

    assert _eager(job) == [(1, "a"), [1, 2, 3]]


def test_step_values_and_cursors_carry_the_types_arguments_carry() -> None:
    when = dt.datetime(2026, 3, 8, 1, 30, tzinfo=ZoneInfo("America/New_York"))
    value = (Decimal("-0.00"), when, uuid.UUID(int=7), frozenset({1}))
    pages = {None: ([1], (when, 2)), (when, 2): ([2], None)}
    seen: list[Any] = []

    def fetch(cursor: Any) -> Any:
        seen.append(cursor)
        return pages[cursor]

    def job() -> Any:
        return [taskq.step("t", lambda: value), list(taskq.iterate("rows", fetch))]

    got = _eager(job)
    assert got == [value, [1, 2]]
    assert got[0][1].tzinfo == ZoneInfo("America/New_York")
    assert seen == [None, (when, 2)]


def test_an_async_step_awaits_its_function() -> None:
    async def fn() -> int:
        return 7

    async def job() -> int:
        return await taskq.astep("a", fn)

    assert _eager(job) == 7


@pytest.mark.parametrize(
    ("value", "says"),
    [(object(), "not msgpack-serializable"), ("x" * 200, "over the 100-byte limit")],
)
def test_a_value_that_cannot_be_stored_fails_with_a_clear_error(value: Any, says: str) -> None:
    with pytest.raises(CheckpointError, match=says):
        _eager(lambda: taskq.step("a", lambda: value), max_result_bytes=100)


@pytest.mark.parametrize("page", [None, ([1], None, 3), ("abc", None)])
def test_a_page_that_is_not_items_and_cursor_is_an_error(page: Any) -> None:
    with pytest.raises(CheckpointError, match="fetch_page"):
        _eager(lambda: list(taskq.iterate("rows", lambda c: page)))


def test_a_cursor_that_cannot_be_encoded_is_an_error() -> None:
    def fetch(cursor: Any) -> Any:
        return ([1], object()) if cursor is None else ([], None)

    with pytest.raises(CheckpointError, match="cursor of iteration 'rows'"):
        _eager(lambda: list(taskq.iterate("rows", fetch)))


def test_a_bad_name_is_an_error() -> None:
    with pytest.raises(CheckpointError, match="non-empty str"):
        _eager(lambda: taskq.step("", lambda: 1))


def test_the_docs_example_runs_as_shown() -> None:
    # given the first example of docs/resumable.md, with stand-ins for the outside calls
    text = (Path(__file__).parents[2] / "docs" / "resumable.md").read_text()
    found = re.search(r"```python\n(.*?)```", text, re.DOTALL)
    assert found is not None
    calls: list[Any] = []
    namespace: dict[str, Any] = {
        "__name__": "docs_resumable",
        "app": App(eager=True),
        "charge_card": lambda order, cents: calls.append("charge") or f"ch_{order}",
        "send_receipt": lambda order, charge: calls.append("email") or True,
        "write_ledger": lambda order, charge, cents: calls.append("ledger") or cents,
        "write_price": calls.append,
    }
    # when it runs, eagerly
    exec(found.group(1), namespace)
    paid = namespace["pay_order"].delay("o-1", 4200).result()
    rows = namespace["backfill_prices"].delay().result()
    # then each step ran once and the walk saw every row
    assert paid == {"charge": "ch_o-1", "booked_cents": 4200}
    assert rows == 1_000 and calls[:3] == ["charge", "email", "ledger"]
    assert calls[3:] == list(range(1_000))
