"""Partitioned queues: one logical queue spread over partitions (each its own queue and hash
tag, so a Redis Cluster puts them on different shards). Producers pick a partition here;
workers read every partition of the queues they serve (``taskq.broker.partitioned``)."""

from __future__ import annotations

import itertools
import zlib
from collections.abc import Iterator, Mapping, Sequence

from taskq.keys import partition_names

_turns: dict[str, Iterator[int]] = {}
"""Per partitioned queue, this process's round-robin counter."""


def partition_of(partitions: Mapping[str, int], queue: str, key: str | None = None) -> str:
    """The queue a job of ``queue`` goes to: itself if it is not partitioned, else one of its
    partitions, by ``key`` (CRC-32, so one key always lands in one partition and its jobs keep
    their order) or round robin."""
    n = partitions.get(queue)
    if not n:
        return queue
    if key is not None:
        index = zlib.crc32(key.encode()) % n
    else:
        index = next(_turns.setdefault(queue, itertools.count())) % n
    return partition_names(queue, n)[index]


def expand(
    partitions: Mapping[str, int], queues: Sequence[str]
) -> tuple[list[str], list[tuple[str, ...]]]:
    """The queues a worker reads for ``queues`` (each partitioned one replaced by its
    partitions, in place), and the partition groups among them."""
    out: list[str] = []
    groups: list[tuple[str, ...]] = []
    for q in queues:
        n = partitions.get(q)
        if n:
            names = partition_names(q, n)
            out += names
            groups.append(names)
        else:
            out.append(q)
    return out, groups
