"""Arguments checked against the task's signature at enqueue, values against its annotations
with ``validate=True``, and dataclasses and pydantic models rebuilt from their annotations
(eager mode: every job is encoded and decoded as a worker would)."""

from __future__ import annotations

import dataclasses
import datetime as dt
import inspect
from decimal import Decimal
from typing import Any, Literal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from taskq import App, EnqueueError
from taskq.argspec import ArgSpec, conforms

pydantic = pytest.importorskip("pydantic")


@dataclasses.dataclass
class Line:
    sku: str
    quantity: int = 1


@dataclasses.dataclass
class Order:
    id: int
    placed: dt.datetime
    lines: list[Line]
    note: Line | None = None


class Customer(pydantic.BaseModel):
    name: str
    credit: Decimal


class Invoice(pydantic.BaseModel):
    customer: Customer
    orders: list[Customer] = pydantic.Field(default_factory=list)


def make(**settings: Any) -> App:
    return App(eager=True, store_results=True, **settings)


def test_arguments_that_do_not_bind_are_refused_naming_the_parameter() -> None:
    app = make()

    @app.task
    def charge(amount: int, currency: str = "EUR", *, account: str) -> None: ...

    with pytest.raises(EnqueueError, match="missing a required argument: 'account'"):
        charge.delay(10)
    with pytest.raises(EnqueueError, match="unexpected keyword argument 'acount'"):
        charge.delay(10, account="a", acount="b")
    with pytest.raises(EnqueueError, match="too many positional arguments"):
        charge.apply_async((1, "EUR", "x"), {"account": "a"})
    with pytest.raises(EnqueueError, match="missing a required argument: 'amount'"):
        charge.starmap([()])
    charge.delay(10, account="a")


def test_a_bound_task_is_checked_without_its_self() -> None:
    app = make()

    @app.task(bind=True)
    def bound(self: Any, x: int) -> int:
        return x

    assert bound.delay(3).result() == 3
    with pytest.raises(EnqueueError, match="'x'"):
        bound.delay()


def test_validate_refuses_a_value_that_does_not_fit_its_annotation() -> None:
    app = make()

    @app.task(validate=True)
    def charge(amount: Decimal, customer: Customer, when: dt.date | None = None) -> None: ...

    alice = Customer(name="alice", credit=Decimal("5"))
    charge.delay(Decimal("10"), alice)
    with pytest.raises(EnqueueError, match="argument 'amount' must be Decimal, not str 'ten'"):
        charge.delay(amount="ten", customer=alice)
    # A model whose field has the wrong type (built without validation), or a map for it.
    bad = Customer.model_construct(name="bob", credit="lots")
    with pytest.raises(EnqueueError, match=r"argument 'customer'.*credit"):
        charge.delay(Decimal("1"), bad)
    with pytest.raises(EnqueueError, match=r"argument 'customer'.*name"):
        charge.delay(Decimal("1"), {"credit": Decimal("1")})


def test_validate_is_an_app_setting_a_task_can_turn_off() -> None:
    app = make(validate=True)

    @app.task
    def strict(n: int) -> None: ...

    @app.task(validate=False)
    def lax(n: int) -> None: ...

    with pytest.raises(EnqueueError, match="'n'"):
        strict.delay("1")
    lax.delay("1")


@pytest.mark.parametrize(
    ("value", "wanted", "fits"),
    [
        (1, float, True),
        (True, str, False),
        (None, int | None, True),
        ("a", Literal["a", "b"], True),
        ("c", Literal["a", "b"], False),
        ([1, "x"], list[int], False),
        ({"a": [1]}, dict[str, list[int]], True),
        ((1, "a"), tuple[int, str], True),
        ((1, 2), tuple[int, ...], True),
        ((1,), tuple[int, str], False),
        ({"sku": "a"}, Line, True),
        ({"quantity": 2}, Line, False),
        ({"sku": 5}, Line, False),
        (Line("a"), Line, True),
        (object(), Any, True),
    ],
)
def test_the_built_in_check(value: Any, wanted: Any, fits: bool) -> None:
    """Without pydantic, validate uses this check."""
    assert (conforms(value, wanted) is None) is fits


def test_dataclasses_travel_as_fields_and_arrive_as_their_type_nested() -> None:
    app = make()
    seen: list[Any] = []

    @app.task
    def ship(order: Order, extra: list[Line], *more: Line, **by_name: Line) -> Order:
        seen.extend([order, extra, more, by_name])
        return order

    order = Order(7, dt.datetime(2026, 1, 2, 3), [Line("a", 2)], note=Line("gift"))
    back = ship.delay(order, [Line("b")], Line("c"), last=Line("d")).result()
    assert seen == [order, [Line("b")], (Line("c"),), {"last": Line("d")}]
    assert back == order and isinstance(back.lines[0], Line)


def test_pydantic_models_arrive_as_their_type_and_results_come_back_as_it() -> None:
    app = make()

    @app.task
    def bill(invoice: Invoice) -> Invoice:
        assert isinstance(invoice.customer, Customer)
        return invoice

    invoice = Invoice(customer=Customer(name="a", credit=Decimal("1.50")))
    back = bill.delay(invoice).result()
    assert back == invoice and isinstance(back, Invoice)
    assert back.customer.credit.as_tuple() == Decimal("1.50").as_tuple()


def test_a_task_without_models_gets_its_arguments_untouched() -> None:
    app = make()

    @app.task
    def same(value: dict[str, Any]) -> Any:
        return value

    value = {"sku": "a", "quantity": 1}
    assert same.delay(value).result() == value
    assert same.spec._plan() == ({}, None)


@st.composite
def signatures(draw: st.DrawFn) -> inspect.Signature:
    """Any valid signature over a few names (defaults only after the required positionals)."""
    P = inspect.Parameter
    kinds = [P.POSITIONAL_ONLY] * draw(st.integers(0, 2))
    kinds += [P.POSITIONAL_OR_KEYWORD] * draw(st.integers(0, 3))
    first_default = draw(st.integers(0, len(kinds)))
    params = [
        P(f"p{i}", kind, default=1 if i >= first_default else P.empty)
        for i, kind in enumerate(kinds)
    ]
    if draw(st.booleans()):
        params.append(P("rest", P.VAR_POSITIONAL))
    params += [
        P(f"k{i}", P.KEYWORD_ONLY, default=draw(st.sampled_from([1, P.empty])))
        for i in range(draw(st.integers(0, 2)))
    ]
    if draw(st.booleans()):
        params.append(P("more", P.VAR_KEYWORD))
    return inspect.Signature(params)


NAMES = st.sets(st.sampled_from(["p0", "p1", "p3", "k0", "k1", "x"]))


@settings(max_examples=500)
@given(signatures(), st.integers(0, 6), NAMES)
def test_the_fast_bind_check_agrees_with_a_real_call(
    sig: inspect.Signature, given_args: int, names: set[str]
) -> None:
    scope: dict[str, Any] = {}
    exec(f"def fn{sig}: pass", scope)  # a function with this signature
    spec = ArgSpec("t", scope["fn"], bound=False)
    args, kwargs = tuple(range(given_args)), dict.fromkeys(names, 0)
    try:
        scope["fn"](*args, **kwargs)
        binds = True
    except TypeError:
        binds = False
    assert spec._binds(args, kwargs) is binds


def test_fields_that_do_not_make_the_type_fail_the_run_naming_the_parameter() -> None:
    app = make()

    @app.task
    def ship(order: Order) -> None: ...

    with pytest.raises(TypeError, match="argument 'order' cannot be rebuilt as Order"):
        ship.delay({"id": 1})  # (sent as another producer would: the fields are short)
