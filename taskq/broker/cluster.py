"""The connection to a Redis Cluster: :class:`~taskq.broker.link.Link` routed by hash slot.

redis-py's cluster client keeps the slot table (``CLUSTER SLOTS``) and one connection pool
per node; the commands themselves go the way every taskq command goes (raw RESP2 replies,
scripts by SHA1), sent to the node that serves their slot:

* a command goes to the master of its key's slot; a script to the master of its keys' slot,
  and every key it declares must be in that slot (refused here, with the fix, before
  anything is sent). On Redis Cluster every key taskq sends carries a hash tag: a queue is
  named ``{tasks}`` (or ``{app}.tasks``...), so all of its keys live in one slot.
* a pipeline is split by node, one write per node, replies put back in order; keyless
  commands (TIME) ride with the command before them; ``WAIT`` goes to every node written
  to, and its reply is the lowest count.
* NOSCRIPT (a node that is new, promoted or restarted) loads the script on that node and
  sends the command again. MOVED, ASK, TRYAGAIN, CLUSTERDOWN and a node that refuses the
  connection mean the command did not run: the slot table is read again and the command
  sent again, for up to :data:`RETRY_S` (a failover takes a few seconds). A connection that
  breaks mid-exchange leaves it unknown whether the commands ran:
  :class:`~taskq.errors.BrokerUnavailable`, as on one server.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, cast

import redis
import redis.cluster
from redis.crc import key_slot

from taskq.broker.link import (
    Command,
    Connection,
    Direct,
    Link,
    as_broker_error,
    exchange,
    map_errors,
    missing_scripts,
    raise_as_broker_error,
)
from taskq.config import redact
from taskq.errors import BrokerUnavailable, ConfigError

RETRY_S = 10.0
"""How long commands refused for a moving topology (MOVED, CLUSTERDOWN, a dead master) are
sent again before :class:`BrokerUnavailable`; a failover takes 3-5 s."""
RETRY_PAUSE_S = 0.1

_KEYLESS = frozenset(
    {"TIME", "PING", "WAIT", "SCRIPT", "INFO", "ECHO", "FLUSHDB", "FLUSHALL", "DBSIZE", "MULTI"}
)
_ALL_ARGS = frozenset({"DEL", "EXISTS", "UNLINK", "MGET", "TOUCH", "BLMOVE", "LMOVE"})
_BROADCAST = frozenset({"FLUSHDB", "FLUSHALL"})
_NOT_RUN = (
    redis.exceptions.AskError,  # MOVED too (a subclass)
    redis.exceptions.TryAgainError,
    redis.exceptions.ClusterDownError,
)


def hash_tag(key: str) -> str | None:
    """The part of ``key`` Redis Cluster hashes, if the key has a hash tag (``{...}``)."""
    start = key.find("{")
    if start < 0:
        return None
    end = key.find("}", start + 1)
    return key[start + 1 : end] if end > start + 1 else None


def command_keys(command: Command) -> Sequence[Any]:
    """The keys a command names (the ones taskq sends; none for TIME, PING...)."""
    name = str(command[0]).upper()
    if name in ("EVALSHA", "EVAL"):
        return command[3 : 3 + int(command[2])]
    if name == "XREADGROUP":
        at = next(i for i, a in enumerate(command) if str(a).upper() == "STREAMS")
        return command[at + 1 : at + 1 + (len(command) - at - 1) // 2]
    if name in ("XGROUP", "XINFO"):
        return command[2:3]
    if name in _KEYLESS or name == "EXEC" or len(command) < 2:
        return ()
    return command[1:] if name in _ALL_ARGS else command[1:2]


def _as_text(key: Any) -> str:
    return key.decode(errors="replace") if isinstance(key, bytes) else str(key)


class ClusterLink(Link):
    """Connection pools to every node of a Redis Cluster (thread-safe).

    Args:
        make: builds redis-py's cluster client (it reads the slot table from the seeds).
        url: where it points, for error messages (its password is never shown).
    """

    cluster = True

    def __init__(self, make: Callable[[], redis.cluster.RedisCluster], url: str) -> None:
        self._make = make
        self._rc: redis.cluster.RedisCluster | None = None
        self._lock = threading.Lock()
        self._stale = False
        self.url = redact(url)

    def __repr__(self) -> str:
        return f"<ClusterLink {self.url}>"

    # -- routing ---------------------------------------------------------------------------

    def slot_of(self, key: str) -> int:
        """The hash slot of ``key``; ConfigError if it has no hash tag (see the module)."""
        if hash_tag(key) is None:
            queue = key.split(":", 1)[0]
            raise ConfigError(
                f"queue {queue!r} cannot live on Redis Cluster: its keys would span hash slots; "
                f"name it '{{{queue}}}' (or '{{group}}.{queue}' to share a slot with other "
                "queues); see docs/protocol.md, Redis Cluster"
            )
        return key_slot(key.encode())

    def _slot(self, command: Command) -> int | None:
        keys = command_keys(command)
        if not keys:
            return None
        slots = {self.slot_of(_as_text(k)) for k in keys}
        if len(slots) > 1:
            what = "a script" if str(command[0]).upper() == "EVALSHA" else str(command[0])
            shown = ", ".join(sorted({_as_text(k) for k in keys})[:4])
            raise ConfigError(
                f"{what} on keys in {len(slots)} hash slots ({shown}...): on Redis Cluster "
                "the queues of one workflow (or one unique/periodic job and its queue) must "
                "share a hash tag, e.g. '{app}.emails' and '{app}.reports'"
            )
        return slots.pop()

    def _cluster(self) -> redis.cluster.RedisCluster:
        with self._lock:
            if self._rc is None:
                self._rc = self._connect()
                self._stale = False
            elif self._stale:
                self._stale = False
                try:
                    self._rc.nodes_manager.initialize()
                except (redis.RedisError, redis.exceptions.RedisClusterException) as exc:
                    self._stale = True
                    raise BrokerUnavailable(f"Redis Cluster at {self.url}: {exc}") from exc
            return self._rc

    def _connect(self) -> redis.cluster.RedisCluster:
        try:
            return self._make()
        except redis.exceptions.RedisClusterException as exc:
            text = str(exc)
            if "Cluster mode is not enabled" in text:
                raise ConfigError(
                    f"{self.url} is not a Redis Cluster (cluster mode is off on its seeds); "
                    "use a redis:// URL for one server"
                ) from None
            raise BrokerUnavailable(
                f"cannot reach Redis Cluster at {self.url}: no seed answered ({text})"
            ) from exc
        except redis.RedisError as exc:
            raise_as_broker_error(exc, self.url)

    def _node_of(self, slot: int | None) -> redis.cluster.ClusterNode:
        rc = self._cluster()
        if slot is None:
            return random.choice(_primaries(rc))
        try:
            return rc.nodes_manager.get_node_from_slot(slot)
        except redis.exceptions.SlotNotCoveredError as exc:
            self._stale = True
            raise _NotRun(exc) from exc

    def _plan(
        self, commands: Sequence[Command], todo: Sequence[int]
    ) -> dict[str, tuple[redis.cluster.ClusterNode, list[int]]]:
        """Node name -> (node, indexes of its commands in order)."""
        plan: dict[str, tuple[redis.cluster.ClusterNode, list[int]]] = {}
        last: redis.cluster.ClusterNode | None = None
        waits: list[int] = []
        for i in todo:
            name = str(commands[i][0]).upper()
            if name == "WAIT":
                waits.append(i)
                continue
            if name in _BROADCAST:
                for node in _primaries(self._cluster()):
                    plan.setdefault(node.name, (node, []))[1].append(i)
                continue
            slot = self._slot(commands[i])
            node = self._node_of(slot) if slot is not None or last is None else last
            last = node
            plan.setdefault(node.name, (node, []))[1].append(i)
        for i in waits:  # after every write, on each node written to
            for _node, idxs in plan.values():
                idxs.append(i)
        return plan

    # -- the three ways ----------------------------------------------------------------------

    def pipeline(
        self, commands: Sequence[Command], *, transaction: bool = False, errors: bool = True
    ) -> list[Any]:
        """As :meth:`Link.pipeline`, one write per node (see the module for the routing)."""
        if transaction:
            return self._transaction(commands, errors)
        return map_errors(self._routed(commands), self.url, errors)

    def _transaction(self, commands: Sequence[Command], errors: bool) -> list[Any]:
        slots = {s for s in (self._slot(c) for c in commands) if s is not None}
        if len(slots) > 1:
            raise ConfigError(f"a MULTI over {len(slots)} hash slots ({commands[:2]}...)")
        block = [("MULTI",), *commands, ("EXEC",)]
        slot = slots.pop() if slots else None
        replies = self._retrying(lambda: self._on_node(self._node_of(slot), block), lambda r: r)
        for reply in replies:
            if isinstance(reply, redis.ResponseError):
                raise_as_broker_error(reply, self.url)
        return map_errors(list(replies[-1]), self.url, errors)

    def _routed(self, commands: Sequence[Command]) -> list[Any]:
        replies: list[Any] = [None] * len(commands)
        todo = list(range(len(commands)))
        deadline = time.monotonic() + RETRY_S
        while True:
            again, error = self._round(commands, todo, replies)
            if not again:
                return replies
            if time.monotonic() > deadline and error is not None:
                raise as_broker_error(error, self.url) from error
            self._stale = True
            time.sleep(RETRY_PAUSE_S)
            todo = again

    def _round(
        self, commands: Sequence[Command], todo: Sequence[int], replies: list[Any]
    ) -> tuple[list[int], Exception | None]:
        """Send the ``todo`` commands, one write per node; their replies go into ``replies``.
        Returns the ones to send again (they did not run), and why."""
        try:
            plan = self._plan(commands, todo)
        except _NotRun as exc:
            return list(todo), exc.cause
        again: set[int] = set()
        error: Exception | None = None
        waits: dict[int, list[Any]] = {}
        for node, idxs in plan.values():
            try:
                got = self._on_node(node, [commands[i] for i in idxs])
            except _NotRun as exc:
                again.update(idxs)
                error = exc.cause
                continue
            for i, reply in zip(idxs, got, strict=True):
                if isinstance(reply, _NOT_RUN):
                    again.add(i)
                    error = reply
                elif str(commands[i][0]).upper() == "WAIT":
                    waits.setdefault(i, []).append(reply)
                else:
                    replies[i] = reply
        for i, counts in waits.items():  # the fewest replicas any node's writes reached
            replies[i] = min(counts, key=lambda r: r if isinstance(r, int) else -1)
        return sorted(again), error

    def _retrying(self, send: Callable[[], list[Any]], check: Callable[[Any], Any]) -> list[Any]:
        """``send()`` again while it is refused for a moving topology (up to RETRY_S)."""
        deadline = time.monotonic() + RETRY_S
        while True:
            try:
                replies = send()
                refused = next((r for r in replies if isinstance(r, _NOT_RUN)), None)
                if refused is None:
                    return replies
                error: Exception = refused
            except _NotRun as exc:
                error = exc.cause
            if time.monotonic() > deadline:
                raise as_broker_error(error, self.url) from error
            self._stale = True
            time.sleep(RETRY_PAUSE_S)

    def _on_node(self, node: redis.cluster.ClusterNode, commands: Sequence[Command]) -> list[Any]:
        """One write of ``commands`` to ``node``; scripts it does not know are loaded there."""
        client = node.redis_connection
        if client is None:
            self._stale = True
            raise _NotRun(redis.ConnectionError(f"no connection to {node.name} yet"))
        pool = client.connection_pool
        try:
            conn = cast(Connection, pool.get_connection())
        except (redis.ConnectionError, redis.TimeoutError) as exc:  # nothing was sent
            self._stale = True
            raise _NotRun(exc) from exc
        try:
            replies = exchange(conn, commands, self.url)
            missing, loads = missing_scripts(commands, replies)
            if missing:
                exchange(conn, loads, self.url)
                again = exchange(conn, [commands[i] for i in missing], self.url)
                for i, reply in zip(missing, again, strict=True):
                    replies[i] = reply
            return replies
        except BaseException:
            conn.disconnect()
            self._stale = True
            raise
        finally:
            pool.release(conn)

    # -- for the consumer loop -------------------------------------------------------------

    def direct(self) -> Direct:
        """The consumer's connection: on a cluster, the routed pools themselves."""
        return ClusterDirect(self)

    # -- lifetime --------------------------------------------------------------------------

    def disconnect(self) -> None:
        """Close every node's pooled connections (they open again on demand)."""
        rc = self._rc
        if rc is not None:
            nodes: list[redis.cluster.ClusterNode] = cast(Any, rc).get_nodes()
            for node in nodes:
                if node.redis_connection is not None:
                    node.redis_connection.connection_pool.disconnect()

    def close(self) -> None:
        rc, self._rc = self._rc, None
        if rc is not None:
            rc.close()


class ClusterDirect(Direct):
    """:class:`Direct`'s interface on a :class:`ClusterLink` (its pools are routed)."""

    def __init__(self, link: ClusterLink) -> None:
        self._link = link
        self.url = link.url

    def call(self, *args: Any) -> Any:
        return self._link.call(*args)

    def pipeline(self, commands: Sequence[Command]) -> list[Any]:
        return self._link.pipeline(commands, errors=False)

    def script(self, name: str, keys: Sequence[Any], args: Sequence[Any]) -> Any:
        return self._link.script(name, keys, args)

    def disconnect(self) -> None:
        self._link.disconnect()


def _primaries(rc: redis.cluster.RedisCluster) -> list[redis.cluster.ClusterNode]:
    primaries: list[redis.cluster.ClusterNode] = cast(Any, rc).get_primaries()
    return primaries


class _NotRun(Exception):
    """Commands that were not sent (no connection, no node for the slot): send them again."""

    def __init__(self, cause: Exception) -> None:
        super().__init__(str(cause))
        self.cause = cause
