"""One slot's read side: the pipelined read without a script (the hot path) and the
``fetch.lua`` call, their commands and replies kept apart so that a worker on queues in
several cluster slots can send every slot's read in one round (see
:mod:`taskq.broker.slots`). The reach and whether the jobs are recorded, which steer a
fetch, live here, with the reads that move them."""

from __future__ import annotations

import time
from collections.abc import Collection, Mapping, Sequence
from typing import Any

from taskq.broker.completions import completions_arg
from taskq.broker.delivery import Delivery, Fetched, delivery
from taskq.broker.link import Direct, Link, script_command
from taskq.broker.replies import as_int, entries, flat_pairs, redis_ms, text
from taskq.broker.resp import Command
from taskq.errors import BrokerError, BrokerRefused
from taskq.keys import GROUP, PRIORITIES, QueueKeys
from taskq.storing import Completion, read_ms

READ_APART_FROM = 8
"""Jobs a fetch takes from which, after jobs that keep records, it sends their acks and
completions through ``fetch.lua`` and reads apart, without the script (see
:meth:`SlotFetcher.fetch`): below it, one round trip costs more than the script's copies."""

FAIR_MAX_BATCH = 64
"""The most jobs a fetch takes from queues that include a fair one. A batch takes the keys
in turn (its admission is the round robin), but the jobs a worker holds run before any key
that arrives after its fetch: adaptive prefetch sizes a batch to about 20 ms of work, and
this bounds it when the pace of recent jobs misjudges the next ones. It is the batch
adaptive prefetch takes of no-op jobs on any queue."""


def ensure_groups(link: Link, streams: Sequence[str]) -> None:
    """Create the consumer group on ``streams`` (idempotent: BUSYGROUP is ignored)."""
    commands = [("XGROUP", "CREATE", s, GROUP, "0", "MKSTREAM") for s in streams]
    for reply in link.pipeline(commands, errors=False):
        if isinstance(reply, Exception) and "BUSYGROUP" not in str(reply):
            raise reply


class SlotFetcher:
    """The read side of queues whose keys share one hash slot (on one server: all of them).

    It owns what steers its reads: the *reach* (the lowest-priority stream a one-job fetch
    reads) and whether the last jobs taken keep status records. Only its own methods move
    them.

    Args:
        link: the connection pool (shared, thread-safe).
        queues: its queues, in the order a worker reads them.
        fair: the fair queues among them (docs/fairness.md).
    """

    def __init__(self, link: Link, queues: Sequence[str], fair: Collection[str] = ()) -> None:
        self.link = link
        self.queues = tuple(queues)
        self.keys = {q: QueueKeys(q) for q in self.queues}
        self.streams = [s for k in self.keys.values() for s in k.streams]
        """The job streams, in the order a worker reads them."""
        self.stream_position = {s: i for i, s in enumerate(self.streams)}
        """Stream → its index in ``streams``."""
        self.fair_streams = [
            self.stream_position[s] for q, k in self.keys.items() if q in fair for s in k.streams
        ]
        """The indexes of the fair queues' streams: every read of them comes right after
        ``fair_admit.lua`` (:meth:`admit_command`), which admits the jobs the read takes."""
        self.where = [(k.stream(p), q, p) for q, k in self.keys.items() for p in PRIORITIES]
        """Per stream index: (stream, queue, priority), what a delivery from it carries."""
        self._fetch_keys = [*self.streams, *(k.due for k in self.keys.values())]
        self._direct: Direct | None = None
        self._reach = 0
        """The lowest-priority stream a one-job fetch reads: the one its last job came from
        (more are read only once those are empty, so a read rarely finds jobs on two)."""
        self.was_reached = False
        """As a part of a multi-slot fetch: the part the last job came from."""
        self._recorded = False
        """The last jobs taken keep status records: their ends write completions (results,
        records), which the fetch script carries, so fetch with it rather than the pipelined
        read without a script."""

    @property
    def direct(self) -> Direct:
        """Its own connection, for the single-threaded consumer loop."""
        if self._direct is None:
            self._direct = self.link.direct()
        return self._direct

    def disconnect(self) -> None:
        """Drop its own connection (e.g. after a read was cut off mid-reply)."""
        if self._direct is not None:
            self._direct.disconnect()

    def ensure_groups(self) -> None:
        """Create the consumer group on its streams (idempotent)."""
        ensure_groups(self.link, self.streams)

    @property
    def recorded(self) -> bool:
        """Whether the last jobs taken keep status records (then fetch with the script)."""
        return self._recorded

    def reach_all(self) -> None:
        """Let the next one-job fetch read every stream at once (its queues were empty)."""
        self._reach = len(self.streams) - 1

    def note_records(self, got: Sequence[Delivery]) -> None:
        """A read outside the fetch script took these: if one keeps a record, the next fetch
        goes through the script, which writes the completions of such jobs."""
        if any(d.recorded for d in got):
            self._recorded = True

    def fetch(
        self,
        consumer: str,
        count: int,
        acks: Sequence[Delivery] = (),
        *,
        completions: Mapping[Delivery, Completion] | None = None,
        fence_acks: bool = True,
        trim: bool = False,
        dirty: Sequence[str] = (),
    ) -> Fetched:
        """:meth:`taskq.broker.Broker.fetch` on this slot's queues."""
        if self.fair_streams:
            count = min(count, FAIR_MAX_BATCH)
        if not (fence_acks and acks) and not completions and not self._recorded:
            finished = sorted({*dirty, *(d.stream for d in acks)})
            fetched = self.fetch_pipelined(consumer, count, acks, finished if trim else ())
            self.note_records(fetched.deliveries)
            if finished and not trim and not fetched.deliveries:
                # Nothing new: a burst ended, so trim the streams its jobs finished in.
                self.direct.script("trim", finished, [GROUP])
            return fetched
        if count >= READ_APART_FROM and not (fence_acks and acks):
            return self._end_then_read(consumer, count, acks, completions, trim, dirty)
        keys, argv = self.script_args(consumer, count, acks, completions, fence_acks, trim, dirty)
        admit = self.admit_command(count, 0, len(self.streams) - 1)
        if admit is None:
            return self.script_replies(self.direct.script("fetch", keys, argv))
        fetch = script_command("fetch", keys, argv)
        [reply] = self.admitted(self.direct.pipeline([admit, fetch]))
        if isinstance(reply, BrokerError):
            raise reply
        return self.script_replies(reply)

    def admit_command(self, count: int, first: int, last: int) -> Command | None:
        """``fair_admit.lua`` for a read of up to ``count`` jobs from streams ``first`` to
        ``last`` (indexes, inclusive): the jobs that read takes from their fair queues' staged
        jobs. None when it reads no stream of a fair queue."""
        streams = [self.streams[i] for i in self.fair_streams if first <= i <= last]
        if not streams or count < 1:
            return None
        return script_command("fair_admit", streams, [GROUP, count])

    @staticmethod
    def admitted(replies: list[Any]) -> list[Any]:
        """The replies after an admission's (which came first): an admission that failed
        raises, as the read after it would have."""
        if isinstance(replies[0], BrokerError):
            raise replies[0]
        return replies[1:]

    def _end_then_read(
        self,
        consumer: str,
        count: int,
        acks: Sequence[Delivery],
        completions: Mapping[Delivery, Completion] | None,
        trim: bool,
        dirty: Sequence[str],
    ) -> Fetched:
        """A batch fetch after jobs that keep records: their acks and completions go through
        ``fetch.lua`` with no read (count 0, no trim), then the reads go without the script,
        as after jobs that keep none. The script would copy every entry it reads into a Lua
        table and back into its reply, which costs Redis more than the extra round trip from
        ``READ_APART_FROM`` jobs a fetch on. A script that fails raises before anything is
        read, as the script's own reads would not have happened; a read that fails after it
        makes the caller send the same acks and completions again, as a ``fetch.lua`` call
        whose reply was lost does (an XACK of an acked entry does nothing; a record that
        ended keeps its first end)."""
        if acks:
            keys, argv = self.script_args(
                consumer, 0, acks, completions, False, False, (), trims=False
            )
            self.direct.script("fetch", keys, argv)
        finished = sorted({*dirty, *(d.stream for d in acks)})
        fetched = self.fetch_pipelined(consumer, count, (), finished if trim else ())
        self._recorded = any(d.recorded for d in fetched.deliveries)
        if finished and not trim and not fetched.deliveries:
            self.direct.script("trim", finished, [GROUP])
        return fetched

    # -- the pipelined read ----------------------------------------------------------------

    def pipelined_commands(
        self,
        consumer: str,
        acks: Sequence[Delivery],
        *,
        read: bool = True,
        count: int = 1,
        first: int = 0,
    ) -> tuple[list[Command], int, int]:
        """XACK of ``acks``, TIME, the due keys, and (``read``) one XREADGROUP of up to
        ``count`` entries per stream from stream ``first`` down to the reach. Returns them,
        how many XACKs lead, and where the reads start."""
        by_stream: dict[str, list[str]] = {}
        for d in acks:
            by_stream.setdefault(d.stream, []).append(d.entry_id)
        commands: list[Command] = [("XACK", s, GROUP, *ids) for s, ids in by_stream.items()]
        commands += [("TIME",), *(("GET", k.due) for k in self.keys.values())]
        first_read = len(commands)
        if read:
            commands += [
                ("XREADGROUP", "GROUP", GROUP, consumer, "COUNT", count, "STREAMS", s, ">")
                for s in self.streams[first : self._reach + 1]
            ]
        return commands, len(by_stream), first_read

    def fetch_pipelined(
        self,
        consumer: str,
        count: int,
        acks: Sequence[Delivery],
        trim: Sequence[str],
        first: int = 0,
    ) -> Fetched:
        """Up to ``count`` jobs without the fetch script: XACK the finished ones and read up
        to ``count`` entries from each stream down to the reach (from stream ``first``), in
        one write with the due keys and the clock (and ``trim.lua`` on the ``trim`` streams,
        after the acks). Redis spends what the commands cost, without a script's copies of
        every entry it returns (at 64 jobs a fetch, the script cost Redis several times its
        commands).

        The streams read are the ones that may hold the best jobs: the reach is the stream of
        the last job a full batch kept, every stream after a short one. A short batch from the
        streams read is filled from the streams below them in a second round trip. When
        several streams have jobs, more than ``count`` can come back: the caller keeps the
        first ``count`` (in priority order) and hands the others back.
        """
        commands, n_acks, first_read = self.pipelined_commands(
            consumer, acks, read=count > 0, count=count, first=first
        )
        read_to = first + len(commands) - first_read  # the streams read end before this one
        if trim:
            commands.append(script_command("trim", trim, [GROUP]))
        admit = self.admit_command(count, first, read_to - 1)
        if admit is None:
            replies = self.direct.pipeline(commands)
        else:
            replies = self.admitted(self.direct.pipeline([admit, *commands]))
        if trim:
            # Housekeeping only: a trim that failed (its stream deleted under it, which the
            # reads answer) is done by a later fetch.
            replies.pop()
        found = self._pipelined_found(replies, n_acks, first_read)
        if found is None:  # a stream or its group was deleted (FLUSHALL, DEL): read again
            self.ensure_groups()
            return self.fetch_pipelined(consumer, count, (), (), first)
        fetched = self._follow(found, count)
        short = count - len(fetched.deliveries)
        if short <= 0 or read_to in (first, len(self.streams)):
            return fetched
        self._reach = len(self.streams) - 1
        more = self.fetch_pipelined(consumer, short, (), (), first=read_to)
        if not fetched.deliveries and not more.deliveries:
            self._reach = 0
        dues = [d for d in (fetched.due_in_ms, more.due_in_ms) if d >= 0]
        return Fetched(fetched.deliveries + more.deliveries, min(dues) if dues else -1)

    def pipelined_replies(self, replies: list[Any], n_acks: int, first_read: int) -> Fetched:
        """What :meth:`pipelined_commands` got back (the reach follows the job found)."""
        fetched = self._pipelined_found(replies, n_acks, first_read)
        if fetched is None:  # the stream or its group was deleted (FLUSHALL, DEL)
            self.ensure_groups()
            return Fetched([], -1)
        return self._follow(fetched, 1)

    def _follow(self, fetched: Fetched, count: int) -> Fetched:
        """Move the reach after a read of ``count`` jobs: to the stream of the last of the
        ``count`` kept, or to every stream when fewer came back."""
        got = fetched.deliveries
        if len(got) >= count > 0:
            self._reach = self.stream_position[got[count - 1].stream]
        elif got:
            self._reach = len(self.streams) - 1
        return fetched

    def _pipelined_found(self, replies: list[Any], n_acks: int, first_read: int) -> Fetched | None:
        """The deliveries and due time in those replies; None if a stream or group is gone."""
        for reply in replies:
            if isinstance(reply, BrokerError):
                if "NOGROUP" not in str(reply):
                    raise reply
                return None
        now = redis_ms(replies[n_acks])
        got = [
            delivery(self.where[self.stream_position[text(stream)]], eid, fields)
            for reply in replies[first_read:]
            for stream, rows in reply or ()
            for eid, fields in entries(rows)
        ]
        return Fetched(got, due_in_ms(now, replies[n_acks + 1 : first_read]))

    # -- the fetch script ------------------------------------------------------------------

    def script_args(
        self,
        consumer: str,
        count: int,
        acks: Sequence[Delivery],
        completions: Mapping[Delivery, Completion] | None,
        fence_acks: bool,
        trim: bool,
        dirty: Sequence[str],
        *,
        trims: bool = True,
    ) -> tuple[list[Any], list[Any]]:
        """The keys and arguments of a ``fetch.lua`` call (see :meth:`fetch`); ``trims``:
        name the streams to trim (the acks' and ``dirty``), which the script trims when it
        reads nothing new (or with ``trim``)."""
        ends = (
            [(i, completions[d]) for i, d in enumerate(acks, 1) if d in completions]
            if completions
            else []
        )
        argv: list[Any] = [GROUP, consumer, count, int(fence_acks), int(trim), len(acks)]
        argv += (len(self.streams), len(ends), len(self._fetch_keys))
        for d in acks:
            argv += (self.stream_position[d.stream] + 1, d.entry_id)
        keys: list[Any] = self._fetch_keys
        if ends:
            argv.append(completions_arg(ends, time.monotonic()))
            touched = [k for _i, c in ends for k in c.op_keys]
            if touched:
                keys = [*keys, *touched]
        if trims:
            streams = {*dirty, *(d.stream for d in acks)}
            argv += sorted({self.stream_position[s] + 1 for s in streams})
        return keys, argv

    def script_replies(self, flat: Any) -> Fetched:
        """The deliveries in ``fetch.lua``'s reply (the reach follows them)."""
        got = [
            delivery(self.where[int(flat[i]) - 1], text(flat[i + 1]), flat_pairs(flat[i + 2]))
            for i in range(1, len(flat), 3)
        ]
        self._reach = self.stream_position[got[0].stream] if got else 0
        self._recorded = any(d.recorded for d in got)
        return Fetched(got, as_int(flat[0], -1))

    # -- the blocking read -----------------------------------------------------------------

    def read_blocking(self, consumer: str, count: int, block_ms: int) -> list[Delivery]:
        """:meth:`taskq.broker.Broker.read_blocking` on this slot's streams."""
        if self.fair_streams:
            count = min(count, FAIR_MAX_BATCH)
        streams = self.streams
        args: list[Any] = ["GROUP", GROUP, consumer, "COUNT", count, "BLOCK", max(1, block_ms)]
        args += ["STREAMS", *streams, *([">"] * len(streams))]
        admit = self.admit_command(count, 0, len(streams) - 1)
        try:
            if admit is None:
                reply = self.direct.call("XREADGROUP", *args)
            else:  # (an error reply raises, as the call's does)
                reply = self.admitted(self.direct.pipeline([admit, ("XREADGROUP", *args)]))[0]
                if isinstance(reply, BrokerError):
                    raise reply
        except BrokerRefused as exc:
            # NOGROUP: the group is gone; UNBLOCKED: the stream was deleted (DEL, FLUSHALL)
            # while this read waited on it.
            if "NOGROUP" not in str(exc) and "UNBLOCKED" not in str(exc):
                raise
            self.ensure_groups()
            return []
        out = []
        for stream_raw, rows in reply or ():
            where = self.where[self.stream_position[text(stream_raw)]]
            out += [delivery(where, eid, fields) for eid, fields in entries(rows)]
        out.sort(key=lambda d: self.stream_position[d.stream])
        self.note_records(out)
        return out


def due_in_ms(now_ms: int, due_keys: Sequence[Any]) -> int:
    """Ms until the earliest of the queues' due keys (GET replies) is due; -1: none is set.
    A due key is untrusted: a fraction is rounded up, and one that is not a time at all is
    passed over (not read as 0, which would promote in a tight loop): the master's forced
    promote, every few seconds, rewrites it from the sets."""
    dues = [ms for ms in map(read_ms, due_keys) if ms is not None]
    return max(0, min(dues) - now_ms) if dues else -1
