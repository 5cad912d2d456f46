"""All Redis I/O: the Broker (every move of a job), its Lua scripts, the connection (``Link``)
and the readers that ``taskq inspect`` and the dead-letter tools use. Nothing outside this
package imports redis-py; its errors become :class:`~taskq.errors.BrokerError` here.

The Broker (with its read side) loads when first used: a process that only enqueues sends
through the ``Link`` and never needs it."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from taskq.broker.delivery import Delivery, Fetched
from taskq.broker.link import Link
from taskq.broker.links import connect

if TYPE_CHECKING:
    from taskq.broker.broker import Broker

__all__ = ["Broker", "Delivery", "Fetched", "Link", "connect"]


def __getattr__(name: str) -> Any:
    if name == "Broker":
        from taskq.broker.broker import Broker

        return Broker
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
