"""The connection to a Redis Cluster: :class:`~taskq.broker.link.Link` routed by hash slot.

redis-py's cluster client keeps the slot table (``CLUSTER SLOTS``) and one connection pool
per node; the commands themselves go the way every taskq command goes (raw RESP2 replies,
scripts by SHA1), sent to the node that serves their slot:

* a command goes to the master of its key's slot; a script to the master of its keys' slot,
  and every key it declares must be in that slot (refused here, with the fix, before
  anything is sent). On Redis Cluster every key taskq sends carries a hash tag: a queue is
  named ``{tasks}`` (or ``{app}.tasks``...), so all of its keys live in one slot.
* a pipeline is split by node, one write per node, replies put back in order; keyless
  commands (TIME, SCAN) ride with the command before them; ``WAIT`` goes to every node written
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

from taskq.broker.link import (
    Direct,
    Link,
    as_broker_error,
    exchange,
    load_missing_scripts,
    map_errors,
    raise_as_broker_error,
    script_command,
)
from taskq.broker.resp import Command, Connection
from taskq.broker.routing import (
    _BROADCAST,
    NotRun,
    as_text,
    command_keys,
    read_all,
    send_all,
    slot_of_key,
)
from taskq.config import redact
from taskq.errors import BrokerError, BrokerUnavailable, ConfigError

RETRY_S = 10.0
"""How long commands refused for a moving topology (MOVED, CLUSTERDOWN, a dead master) are
sent again before :class:`BrokerUnavailable`; a failover takes 3-5 s."""
RETRY_PAUSE_S = 0.1

_NOT_RUN = (
    redis.exceptions.AskError,  # MOVED too (a subclass)
    redis.exceptions.TryAgainError,
    redis.exceptions.ClusterDownError,
)


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
        return slot_of_key(key)

    def _slot(self, command: Command) -> int | None:
        keys = command_keys(command)
        if not keys:
            return None
        slots = {self.slot_of(as_text(k)) for k in keys}
        if len(slots) > 1:
            what = "a script" if str(command[0]).upper() == "EVALSHA" else str(command[0])
            shown = ", ".join(sorted({as_text(k) for k in keys})[:4])
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
            raise NotRun(exc) from exc

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
        if waits and not plan:  # a WAIT alone: any master
            node = self._node_of(None)
            plan[node.name] = (node, [])
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

    def routed(self, commands: Sequence[Command], own: dict[str, Connection]) -> list[Any]:
        """:meth:`pipeline` with ``errors=False`` on the caller's own connections (one per
        node, made on first use): :class:`ClusterDirect`'s way."""
        return map_errors(self._routed(commands, own), self.url, False)

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

    def _routed(
        self, commands: Sequence[Command], own: dict[str, Connection] | None = None
    ) -> list[Any]:
        replies: list[Any] = [None] * len(commands)
        todo = list(range(len(commands)))
        deadline = time.monotonic() + RETRY_S
        while True:
            again, error = self._round(commands, todo, replies, own)
            if not again:
                return replies
            if time.monotonic() > deadline and error is not None:
                raise as_broker_error(error, self.url) from error
            self._stale = True
            time.sleep(RETRY_PAUSE_S)
            todo = again

    def _round(
        self,
        commands: Sequence[Command],
        todo: Sequence[int],
        replies: list[Any],
        own: dict[str, Connection] | None,
    ) -> tuple[list[int], Exception | None]:
        """Send the ``todo`` commands, one write per node; their replies go into ``replies``.
        Returns the ones to send again (they did not run), and why."""
        try:
            plan = self._plan(commands, todo)
        except NotRun as exc:
            return list(todo), exc.cause
        again: set[int] = set()
        error: Exception | None = None
        waits: dict[int, list[Any]] = {}
        batches = [(node, [commands[i] for i in idxs]) for node, idxs in plan.values()]
        for (_, idxs), got in zip(plan.values(), self._on_nodes(batches, own), strict=True):
            if isinstance(got, NotRun):
                again.update(idxs)
                error = got.cause
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
            except NotRun as exc:
                error = exc.cause
            if time.monotonic() > deadline:
                raise as_broker_error(error, self.url) from error
            self._stale = True
            time.sleep(RETRY_PAUSE_S)

    def _on_node(self, node: redis.cluster.ClusterNode, commands: Sequence[Command]) -> list[Any]:
        """One write of ``commands`` to ``node``; scripts it does not know are loaded there."""
        [got] = self._on_nodes([(node, commands)])
        if isinstance(got, NotRun):
            raise got
        return got

    def _on_nodes(
        self,
        batches: Sequence[tuple[redis.cluster.ClusterNode, Sequence[Command]]],
        own: dict[str, Connection] | None = None,
    ) -> list[list[Any] | NotRun]:
        """Each batch in one write to its node, every write before any read (the nodes work
        at once); a node that could not be reached gets a :class:`NotRun` in its place."""
        out: list[list[Any] | NotRun] = []
        held: list[tuple[Any, Connection]] = []
        try:
            for node, commands in batches:
                try:
                    pool, conn = self._checkout(node) if own is None else self._own(node, own)
                except NotRun as exc:
                    out.append(exc)
                    continue
                held.append((pool, conn))
                send_all(conn, commands, self.url)
                out.append([])
            at = 0
            for i, (_node, commands) in enumerate(batches):
                if isinstance(out[i], NotRun):
                    continue
                out[i] = self._replies(held[at][1], commands)
                at += 1
            return out
        except BaseException:
            self._drop(held, own)
            raise
        finally:
            for pool, conn in held:
                if pool is not None:
                    pool.release(conn)

    def _checkout_pool(self, node: redis.cluster.ClusterNode) -> tuple[Any, None]:
        client = node.redis_connection
        if client is None:
            self._stale = True
            raise NotRun(redis.ConnectionError(f"no connection to {node.name} yet"))
        return client.connection_pool, None

    def _checkout(self, node: redis.cluster.ClusterNode) -> tuple[Any, Connection]:
        pool, _ = self._checkout_pool(node)
        try:
            return pool, cast(Connection, pool.get_connection())
        except (redis.ConnectionError, redis.TimeoutError) as exc:  # nothing was sent
            self._stale = True
            raise NotRun(exc) from exc

    def _drop(self, held: list[tuple[Any, Connection]], own: dict[str, Connection] | None) -> None:
        """Connections cut off mid-exchange: out of step, so closed (and forgotten, if the
        caller's own: they may have been a dead node's)."""
        for _pool, conn in held:
            conn.disconnect()
        if own is not None:
            for name in [n for n, c in own.items() if any(c is h for _, h in held)]:
                del own[name]
        self._stale = True

    def _own(
        self, node: redis.cluster.ClusterNode, own: dict[str, Connection]
    ) -> tuple[None, Connection]:
        """The caller's own connection to ``node``: no pool, no lock, no check per use."""
        conn = own.get(node.name)
        if conn is None:
            pool, _ = self._checkout_pool(node)
            conn = cast(Connection, pool.make_connection())
            try:
                conn.connect()
            except (redis.ConnectionError, redis.TimeoutError) as exc:  # nothing was sent
                self._stale = True
                raise NotRun(exc) from exc
            own[node.name] = conn
        return None, conn

    def _replies(self, conn: Connection, commands: Sequence[Command]) -> list[Any]:
        replies = read_all(conn, len(commands), self.url)
        # NOSCRIPT: load them on this node, send those again
        return load_missing_scripts(commands, replies, lambda cs: exchange(conn, cs, self.url))

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
        self._conns: dict[str, Connection] = {}
        """Node name -> this caller's own connection to it."""

    def call(self, *args: Any) -> Any:
        [reply] = self.pipeline([args])
        if isinstance(reply, BrokerError):
            raise reply
        return reply

    def pipeline(self, commands: Sequence[Command]) -> list[Any]:
        return self._link.routed(commands, self._conns)

    def script(self, name: str, keys: Sequence[Any], args: Sequence[Any]) -> Any:
        return self.call(*script_command(name, keys, args))

    def disconnect(self) -> None:
        conns, self._conns = self._conns, {}
        for conn in conns.values():
            conn.disconnect()


def _primaries(rc: redis.cluster.RedisCluster) -> list[redis.cluster.ClusterNode]:
    primaries: list[redis.cluster.ClusterNode] = cast(Any, rc).get_primaries()
    return primaries
