"""Fair queues' Redis side beyond enqueue and fetch (docs/fairness.md): the mark a worker
sets or checks at start, ``taskq fair off``'s migration, and weights set at run time."""

from __future__ import annotations

from collections.abc import Collection, Sequence

from taskq.broker.control import Auditor
from taskq.broker.link import Link
from taskq.broker.replies import as_int
from taskq.errors import ConfigError
from taskq.keys import PRIORITIES, QueueKeys

OFF_KEYS_PER_CALL = 100
OFF_JOBS_PER_CALL = 1_000
"""``taskq fair off`` moves at most this many staged jobs per script call (of this many keys,
taken in turn), so that Redis serves others between calls."""
MAX_WEIGHT = 1_000
RECOUNT_KEYS = 100
"""How many of a fair queue's highest ranked keys a fair worker's master counts exactly
(fair_recount.lua) every :data:`RECOUNT_EVERY_S`."""
RECOUNT_EVERY_S = 2.0


def claim_fairness(link: Link, queues: Sequence[str], fair: Collection[str]) -> None:
    """At a worker's start: mark its fair queues fair; refuse a queue it serves plainly
    while jobs wait there under fairness (staged jobs no plain worker would admit).

    Raises:
        ConfigError: naming the queue and ``taskq fair off``.
    """
    for q in queues:
        k = QueueKeys(q)
        mode = "on" if q in fair else "plain"
        if as_int(link.script("fair_mode", [k.fair_mode, k.fair_waiting], [mode])) > 0:
            raise ConfigError(
                f"queue {q!r} has jobs waiting under fair scheduling, but this worker's "
                f"fair_queues does not name it: run `taskq fair off {q}` to move them into "
                "its streams first, or name it in fair_queues (TASKQ_FAIR_QUEUES)"
            )


def recount_fair(link: Link, queues: Collection[str]) -> None:
    """Set the scores of each fair queue's highest ranked keys to their staged jobs: admitting
    takes nothing off a key's score (it would cost every fetch a sorted-set update), so
    without this a key that once had many jobs would stay ranked among the top keys."""
    for q in queues:
        k = QueueKeys(q)
        link.script("fair_recount", [k.fair_waiting, k.stream(PRIORITIES[0])], [RECOUNT_KEYS])


def fair_off(link: Link, queue: str) -> int:
    """Move every staged job of ``queue`` into its streams and drop its fairness state
    (``taskq fair off``); returns how many jobs moved."""
    k = QueueKeys(queue)
    keys = [k.fair_mode, k.fair_waiting, *k.streams, *(k.fair_turns(p) for p in PRIORITIES)]
    total = 0
    while True:  # passes until one moves nothing (a key skipped while ranks shifted)
        rank, moved = 0, 0
        while rank >= 0:
            args = ["move", rank, OFF_KEYS_PER_CALL, OFF_JOBS_PER_CALL]
            n, rank = (as_int(x) for x in link.script("fair_off", keys, args))
            moved += n
        total += moved
        if moved == 0:
            link.script("fair_off", keys, ["finish", 0, 1, 1])
            return total


def set_weight(auditor: Auditor, queue: str, key: str, weight: int) -> None:
    """Set a fairness key's weight (1 deletes the field), audited.

    Raises:
        ConfigError: not a whole number from 1 to 1,000.
    """
    if isinstance(weight, bool) or not isinstance(weight, int) or not 1 <= weight <= MAX_WEIGHT:
        raise ConfigError(f"a fair weight is a whole number 1 to {MAX_WEIGHT}, not {weight!r}")
    k = QueueKeys(queue)
    args = [key, weight, *auditor.args("fair_weight", {"key": key, "weight": weight})]
    auditor.link.script("fair_weight", [k.fair_weights, k.audit], args)
