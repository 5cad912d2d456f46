"""Queues in several hash slots of a Redis Cluster: cut into runs that share a slot, each
read by a fetcher of its own, so that every call goes to one slot and never across."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from taskq.broker.delivery import Delivery, Fetched
from taskq.broker.fetching import FAIR_MAX_BATCH, SlotFetcher
from taskq.broker.link import Link, script_command
from taskq.broker.partitioned import PartitionGroup
from taskq.broker.resp import Command
from taskq.errors import BrokerError
from taskq.keys import PRIORITIES, QueueKeys
from taskq.storing import Completion


def slot_runs(link: Link, queues: Sequence[str]) -> list[tuple[str, ...]]:
    """``queues`` cut into runs of consecutive queues whose keys share a hash slot (one run
    on one server; on a Redis Cluster a queue without a hash tag is a ConfigError)."""
    runs: list[tuple[str, ...]] = []
    last = None
    for q in queues:
        slot = link.slot_of(QueueKeys(q).stream(PRIORITIES[0]))
        if runs and slot == last:
            runs[-1] += (q,)
        else:
            runs.append((q,))
        last = slot
    return runs


def fetch_parts(
    parts: Sequence[SlotFetcher | PartitionGroup],
    consumer: str,
    count: int,
    acks: Sequence[Delivery],
    completions: Mapping[Delivery, Completion] | None,
    fence_acks: bool,
    trim: bool,
    dirty: Sequence[str],
) -> Fetched:
    """:meth:`taskq.broker.Broker.fetch` over queues in several slots: one call per slot, in
    the queues' order, until ``count`` jobs came back (later slots are called only for their
    acks)."""
    fetched, start = one_round(parts, consumer, count, acks, completions, fence_acks, trim, dirty)
    if fetched is not None:
        return fetched
    if start:  # the round acked, and found the slots before `start` empty
        acks, completions = (), None
    got: list[Delivery] = []
    dues: list[int] = []
    for part in parts[start:]:
        mine = [d for d in acks if d.queue in part.keys]
        want = max(0, count - len(got))
        if not want and not mine:
            continue
        done = {d: c for d, c in (completions or {}).items() if d.queue in part.keys}
        stale = [s for s in dirty if s in part.stream_position]
        if isinstance(part, PartitionGroup):
            fetched = part.fetch(consumer, want, mine, done, fence_acks, trim, stale)
        else:
            fetched = part.fetch(
                consumer, want, mine, completions=done, fence_acks=fence_acks, trim=trim,
                dirty=stale,
            )  # fmt: skip
            if not fetched.deliveries:  # next time, read all its streams in the first round
                part.reach_all()
        got += fetched.deliveries
        if fetched.due_in_ms >= 0:
            dues.append(fetched.due_in_ms)
    if got:
        reached(parts, got)
    return Fetched(got, min(dues) if dues else -1)


def one_round(
    parts: Sequence[SlotFetcher | PartitionGroup],
    consumer: str,
    count: int,
    acks: Sequence[Delivery],
    completions: Mapping[Delivery, Completion] | None,
    fence_acks: bool,
    trim: bool,
    dirty: Sequence[str],
) -> tuple[Fetched | None, int]:
    """Every slot's read in one round where it applies: what it found (None: nothing, or
    not tried), and the first slot the slot-by-slot path still has to look at."""
    fetchers = [p for p in parts if not isinstance(p, PartitionGroup)]
    if len(fetchers) < len(parts):
        return None, 0
    if count == 1 and not fence_acks and not trim and not completions:
        return fetch_one_round(fetchers, consumer, acks), 0
    if count > 1 and fetchers[0].link.cluster:
        reach = next((i for i, p in enumerate(fetchers) if p.was_reached), 0)
        args = (consumer, count, acks, completions, fence_acks, trim, dirty)
        return fetch_script_round(fetchers, *args), reach + 1
    return None, 0


def fetch_one_round(
    parts: Sequence[SlotFetcher], consumer: str, acks: Sequence[Delivery]
) -> Fetched | None:
    """The one-job read of every slot down to the one the last job came from, all in one
    pipeline (the cluster link writes to every node before it reads any), plus the acks of
    the slots after it: one round for the worker however many slots come before its job.
    None when it found nothing (the caller's slot-by-slot path then trims and looks again)."""
    if any(p.recorded or p.fair_streams for p in parts):  # (these read by their script)
        return None
    reach = next((i for i, p in enumerate(parts) if p.was_reached), 0)
    commands: list[Command] = []
    spans = []
    for i, part in enumerate(parts):
        mine = [d for d in acks if d.queue in part.keys]
        if i > reach and not mine:
            continue
        cmds, n_acks, first_read = part.pipelined_commands(consumer, mine, read=i <= reach)
        spans.append((part, len(commands), len(cmds), n_acks, first_read))
        commands += cmds
    replies = parts[0].direct.pipeline(commands)
    got: list[Delivery] = []
    dues: list[int] = []
    for part, at, n, n_acks, first_read in spans:
        fetched = part.pipelined_replies(replies[at : at + n], n_acks, first_read)
        if fetched.deliveries:
            part.note_records(fetched.deliveries)
        elif first_read < n:  # read and empty: all its streams next time, in one go
            part.reach_all()
        got += fetched.deliveries
        if fetched.due_in_ms >= 0:
            dues.append(fetched.due_in_ms)
    if not got:
        return None
    reached(parts, got)
    return Fetched(got, min(dues) if dues else -1)


def reached(parts: Sequence[SlotFetcher | PartitionGroup], got: Sequence[Delivery]) -> None:
    """Remember which part the first job came from: the next round reads down to it."""
    for part in parts:
        if not isinstance(part, PartitionGroup):
            part.was_reached = bool(got) and got[0].queue in part.keys


def fetch_script_round(
    parts: Sequence[SlotFetcher],
    consumer: str,
    count: int,
    acks: Sequence[Delivery],
    completions: Mapping[Delivery, Completion] | None,
    fence_acks: bool,
    trim: bool,
    dirty: Sequence[str],
) -> Fetched | None:
    """:func:`fetch_one_round` for a batch: each slot's ``fetch.lua`` call down to the slot
    the last batch came from (slots before it were empty then), and the acks of the slots
    after it, in one pipeline. When an earlier slot has jobs again, both come back (the
    consumer keeps the first ``count``, in queue order, and hands the rest back). None when
    nothing came: the caller looks at the later slots one by one."""
    reach = next((i for i, p in enumerate(parts) if p.was_reached), 0)
    commands: list[Command] = []
    fetch_at: list[int] = []
    used: list[SlotFetcher] = []
    for i, part in enumerate(parts):
        mine = [d for d in acks if d.queue in part.keys]
        if i > reach and not mine:
            continue
        done = {d: c for d, c in (completions or {}).items() if d.queue in part.keys}
        stale = [s for s in dirty if s in part.stream_position]
        want = (min(count, FAIR_MAX_BATCH) if part.fair_streams else count) if i <= reach else 0
        keys, argv = part.script_args(consumer, want, mine, done, fence_acks, trim, stale)
        admit = part.admit_command(want, 0, len(part.streams) - 1)
        if admit is not None:  # (its reply, the number admitted, is not needed)
            commands.append(admit)
        fetch_at.append(len(commands))
        commands.append(script_command("fetch", keys, argv))
        used.append(part)
    got: list[Delivery] = []
    dues: list[int] = []
    replies = parts[0].direct.pipeline(commands)
    for reply in replies:
        if isinstance(reply, BrokerError):
            raise reply
    for part, reply in zip(used, (replies[i] for i in fetch_at), strict=True):
        fetched = part.script_replies(reply)
        got += fetched.deliveries
        if fetched.due_in_ms >= 0:
            dues.append(fetched.due_in_ms)
    if not got:
        return None
    reached(parts, got)
    return Fetched(got, min(dues) if dues else -1)
