"""What a reader sees of a fair queue's keys (docs/fairness.md, "Seeing it"): the values that
``app.fair_key``, ``taskq inspect``, the metrics and the dashboard show, and the pure parsers
that turn the raw replies of :mod:`taskq.broker.fairreads` into them.

Everything parsed here comes from Redis and is untrusted: a score that is not a count of
jobs, a weight that is not one, a member of any size or bytes are skipped or marked, never
raised on.
"""

from __future__ import annotations

from dataclasses import dataclass

WEIGHT_DEFAULT = 1
"""A key's weight when none is stored."""
WEIGHT_MAX = 1_000
"""The largest weight (docs/fairness.md: weights are integers from 1 to 1,000)."""
INVALID_WEIGHT = 0
"""The weight shown for a key whose stored weight is not an integer from 1 to
:data:`WEIGHT_MAX` (``taskq inspect`` prints ``invalid``)."""

TOP_KEYS = 10
"""Keys with the most waiting jobs that inspect, the metrics and the dashboard show."""
KEYS_PAGE = 1_000
"""The ZSCAN ``COUNT`` of one page of ``taskq inspect --json``'s key list (a hint to Redis)."""
KEY_SHOWN_BYTES = 1_000
"""A longer member of the waiting set is shown as its first bytes and ``…``."""


@dataclass(frozen=True)
class FairKey:
    """One fairness key of a fair queue.

    Attributes:
        key: the fairness key (as stored, shortened past :data:`KEY_SHOWN_BYTES`).
        weight: its weight, 1 unless set (:data:`INVALID_WEIGHT` if what is stored is not
            a weight).
        waiting: its jobs staged for their turn, every priority, counted from its lists
            (for a partitioned queue, summed over the partitions).
    """

    key: str
    weight: int
    waiting: int


@dataclass(frozen=True)
class FairStats:
    """A fair queue's keys as ``taskq inspect`` shows them.

    Attributes:
        on: the queue is marked fair (``<queue>:fair:mode`` is ``on``).
        active_keys: keys with jobs waiting (ZCARD of ``<queue>:fair:waiting``).
        top: up to :data:`TOP_KEYS` keys with the most waiting jobs, most first (the best
            counted of those the waiting keys rank highest).
        keys: one ZSCAN page of every key (``--json`` only, else empty).
        keys_cursor: the cursor of the next page (``--keys-cursor``), None after the last;
            also None when no page was asked for.
    """

    on: bool
    active_keys: int
    top: tuple[FairKey, ...]
    keys: tuple[FairKey, ...] = ()
    keys_cursor: str | None = None


def weight_of(stored: object) -> int:
    """A stored weight: :data:`WEIGHT_DEFAULT` when absent, :data:`INVALID_WEIGHT` when it
    is not an integer from 1 to :data:`WEIGHT_MAX`."""
    if stored is None:
        return WEIGHT_DEFAULT
    raw = stored.decode(errors="replace") if isinstance(stored, bytes) else str(stored)
    if not raw.isascii() or not raw.isdigit() or len(raw) > 4:
        return INVALID_WEIGHT
    value = int(raw)
    return value if 1 <= value <= WEIGHT_MAX else INVALID_WEIGHT


def key_shown(member: bytes) -> str:
    """A member of the waiting set as text: bytes that are not UTF-8 replaced, and past
    :data:`KEY_SHOWN_BYTES` cut with ``…``."""
    if len(member) <= KEY_SHOWN_BYTES:
        return member.decode(errors="replace")
    return member[:KEY_SHOWN_BYTES].decode(errors="replace") + "…"
