"""The Broker's read side: which fetcher reads, for queues on one server, in several slots
of a Redis Cluster, or with partitions. The :class:`~taskq.broker.Broker` owns one and
hands it every fetch and blocking read; the state that steers the reads lives in the
fetchers (:mod:`taskq.broker.fetching`), never in the Broker."""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence

from taskq.broker.delivery import Delivery, Fetched
from taskq.broker.fetching import SlotFetcher
from taskq.broker.link import Link
from taskq.broker.partitioned import units_of
from taskq.broker.slots import fetch_parts, slot_runs
from taskq.storing import Completion


class Fetcher:
    """Reads jobs for a set of queues (see :meth:`taskq.broker.Broker.fetch`).

    Args:
        link: the connection pool (shared, thread-safe).
        queues: the queues, in the order a worker reads them.
        groups: the partitions of each partitioned queue among them.
        fair: the fair queues among them (each partition of a fair partitioned queue).
    """

    def __init__(
        self,
        link: Link,
        queues: Sequence[str],
        *,
        groups: Sequence[Sequence[str]] = (),
        fair: Collection[str] = (),
    ) -> None:
        self.whole = SlotFetcher(link, queues, fair)
        """Every queue: the fetcher that reads when they share one slot and none is
        partitioned (its connection is the consumer's own either way)."""
        runs = slot_runs(link, self.whole.queues)
        self.parts = [SlotFetcher(link, run, fair) for run in runs] if len(runs) > 1 else []
        """On a Redis Cluster, a fetcher per run of consecutive queues that share a hash
        slot: each call goes to one slot, never across (empty: all queues share one slot)."""
        self._units = units_of(link, self.whole.queues, groups, fair)
        """With partitioned queues (``groups``: the partitions of each), what a fetch reads
        in turn: each run of other queues, and each queue's partitions as one group."""

    @property
    def slots(self) -> list[SlotFetcher]:
        """One fetcher per hash slot the queues are in (the whole, on one slot)."""
        return self.parts or [self.whole]

    def fetch(
        self,
        consumer: str,
        count: int,
        acks: Sequence[Delivery],
        completions: Mapping[Delivery, Completion] | None,
        fence_acks: bool,
        trim: bool,
        dirty: Sequence[str],
    ) -> Fetched:
        """:meth:`taskq.broker.Broker.fetch`, by the fetcher(s) that read these queues."""
        if self._units or self.parts:
            parts = self._units or self.parts
            return fetch_parts(parts, consumer, count, acks, completions, fence_acks, trim, dirty)
        return self.whole.fetch(
            consumer, count, acks, completions=completions, fence_acks=fence_acks, trim=trim,
            dirty=dirty,
        )  # fmt: skip

    def read_blocking(self, consumer: str, count: int, block_ms: int) -> list[Delivery]:
        """:meth:`taskq.broker.Broker.read_blocking`: in several slots, one at a time, each
        for its share of the wait."""
        if not self.parts:
            return self.whole.read_blocking(consumer, count, block_ms)
        share_ms = max(1, block_ms // len(self.parts))
        for part in self.parts:
            got = part.read_blocking(consumer, count, share_ms)
            if got:
                return got
        return []
