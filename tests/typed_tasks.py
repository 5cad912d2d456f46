"""Tasks with typed arguments that the argument-type tests run in worker subprocesses."""

from __future__ import annotations

import dataclasses
import datetime as dt
import enum
from decimal import Decimal
from typing import Any

import pydantic

from taskq import App

app = App(store_results=True)  # configured by TASKQ_* variables set by the test fixtures


class Size(enum.Enum):
    SMALL = "s"
    LARGE = "l"


@dataclasses.dataclass(frozen=True)
class Line:
    sku: str
    price: Decimal


@dataclasses.dataclass(frozen=True)
class Order:
    id: int
    placed: dt.datetime
    lines: tuple[Line, ...]
    size: Size = Size.SMALL


class Customer(pydantic.BaseModel):
    name: str
    since: dt.date
    orders: list[Order] = pydantic.Field(default_factory=list)


@app.task
def echo(*args: Any, **kwargs: Any) -> Any:
    """Returns what it got, with the type names it saw."""
    seen = [type(a).__name__ for a in args] + [type(v).__name__ for v in kwargs.values()]
    return [list(args), kwargs, seen]


@app.task
def total(order: Order, customer: Customer) -> Order:
    """Fails (TypeError) unless both arrive as their types."""
    if not (isinstance(order, Order) and isinstance(customer, Customer)):
        raise TypeError(f"got {type(order).__name__} and {type(customer).__name__}")
    if not all(isinstance(line, Line) for line in order.lines + customer.orders[0].lines):
        raise TypeError("lines are not Lines")
    return dataclasses.replace(order, lines=(*order.lines, Line("total", order_total(order))))


def order_total(order: Order) -> Decimal:
    return sum((line.price for line in order.lines), Decimal(0))


@app.task
def first_line(order: Order) -> Line:
    """A chain step: the previous step's Order arrives as an Order."""
    return order.lines[0]


@app.task
def prices(lines: list[Line]) -> list[Decimal]:
    """A chord's body: its header's Lines arrive as Lines."""
    return [line.price for line in lines]
