"""All Redis I/O: the Broker (every move of a job), its Lua scripts, the connection (``Link``)
and the readers that ``taskq inspect`` and the dead-letter tools use. Nothing outside this
package imports redis-py; its errors become :class:`~taskq.errors.BrokerError` here."""

from taskq.broker.broker import Broker
from taskq.broker.delivery import Delivery, Fetched
from taskq.broker.link import Link
from taskq.broker.links import connect

__all__ = ["Broker", "Delivery", "Fetched", "Link", "connect"]
