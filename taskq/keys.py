"""The Redis key schema of one queue, in one screen.

Every key of queue ``tasks`` starts with ``tasks:``. A queue named with a hash tag, e.g.
``{tasks}`` (or ``{app}.tasks``), therefore puts all of its keys in one cluster slot, so the
multi-key scripts in ``taskq/broker/`` are single-slot on Redis Cluster, where taskq requires
the tag (docs/protocol.md, "Topologies").
"""

from __future__ import annotations

import functools
import os
import re
from typing import NamedTuple

from taskq.errors import ConfigError

PRIORITIES: tuple[str, ...] = ("high", "normal", "low")
"""Priority names, in the order a worker reads them."""


def check_priority(priority: str) -> None:
    """Raises ConfigError for a priority that is not one of :data:`PRIORITIES`."""
    if priority not in PRIORITIES:
        raise ConfigError(f"unknown priority {priority!r}; use one of {', '.join(PRIORITIES)}")


MAX_JOB_ID_CHARS = 200


MAX_FAIR_KEY_CHARS = 200
"""The longest fairness key: it names a list key and a hash field of its queue."""
DEFAULT_FAIR_KEY = "default"
"""The key of a fair queue's jobs that name none."""


def check_fair_key(key: object) -> str:
    """A fairness key (docs/fairness.md) names a key of its queue: a string of 1 to 200
    printable characters without whitespace.

    Raises:
        ConfigError: it is not.
    """
    if (
        not isinstance(key, str)
        or not 1 <= len(key) <= MAX_FAIR_KEY_CHARS
        or not key.isprintable()
        or any(c.isspace() for c in key)
    ):
        raise ConfigError(
            f"invalid fair_key {key!r}: 1 to {MAX_FAIR_KEY_CHARS} printable characters, "
            "no whitespace"
        )
    return key


def check_job_id(job_id: str) -> None:
    """A job id names keys and appears in URLs: it must be non-empty, short, and free of
    spaces, control characters, slashes and ``..`` (so that no id reads as a path).

    Raises:
        ConfigError: it is not.
    """
    if (
        not isinstance(job_id, str)
        or not job_id
        or len(job_id) > MAX_JOB_ID_CHARS
        or not job_id.isprintable()
        or any(c.isspace() or c in "/\\" for c in job_id)
        or ".." in job_id
    ):
        raise ConfigError(
            f"invalid job id {job_id!r:.{MAX_JOB_ID_CHARS + 10}}: expected up to "
            f"{MAX_JOB_ID_CHARS} printable characters without spaces, '/', '\\' or '..' "
            "(taskq's own ids are 32 hex digits)"
        )


is_plain_job_id = re.compile("[0-9a-f]{32}").fullmatch
"""Whether a job id is one taskq makes: 32 hex digits, which pass :func:`check_job_id`
(checked faster, on the path of every job)."""


GROUP = "taskq"
"""The one consumer group on every job stream."""

RECOVER_CONSUMER = "taskq:recover"
"""Pseudo-consumer the sweep claims the jobs of dead workers for, before it settles them."""


def worker_id(host: str, pid: int) -> str:
    """A worker's id: ``<host>:<master pid>:<random>``.

    The random part keeps ids apart where hosts share a name and pids repeat (containers
    with their own PID namespace): two masters with one id would hand back each other's jobs.
    """
    return f"{host}:{pid}:{os.urandom(3).hex()}"


def consumer_name(worker_id: str, index: int, pid: int) -> str:
    """A child's consumer name: ``<worker id>:<child index>:<child pid>``."""
    return f"{worker_id}:{index}:{pid}"


def worker_of(consumer: str) -> str | None:
    """The worker id a child consumer belongs to, if it is one."""
    parts = consumer.rsplit(":", 2)
    return parts[0] if len(parts) == 3 else None


def partition_names(queue: str, partitions: int) -> tuple[str, ...]:
    """The queues a partitioned queue is made of, each its own hash tag: ``tasks`` (or
    ``{tasks}``) in 3 partitions is ``{tasks.0}``, ``{tasks.1}``, ``{tasks.2}``."""
    base = queue[1:-1] if queue.startswith("{") and queue.endswith("}") else queue
    return tuple(f"{{{base}.{i}}}" for i in range(partitions))


@functools.lru_cache(maxsize=1024)
def stream_key(queue: str, priority: str) -> str:
    """``<queue>:<priority>``, cached: the producer asks for it once per job."""
    return QueueKeys(queue).stream(priority)


class QueueKeys(NamedTuple):
    """The keys of one queue. A named tuple, not a frozen dataclass: every worker defines
    it at its start, where a frozen dataclass costs about 4M instructions to define."""

    queue: str

    def stream(self, priority: str) -> str:
        """Job stream of one priority, e.g. ``tasks:high``."""
        return f"{self.queue}:{priority}"

    @property
    def streams(self) -> tuple[str, ...]:
        """The three job streams, highest priority first."""
        return tuple(self.stream(p) for p in PRIORITIES)

    def retry(self, priority: str) -> str:
        """Sorted set of failed jobs of one priority waiting out their backoff, scored by when
        they are due again (members: ``<first failure ms>\n<p>\n<task>\n<body>``)."""
        return f"{self.queue}:retry:{priority}"

    @property
    def deadletter(self) -> str:
        """Stream of jobs that failed for good."""
        return f"{self.queue}:deadletter"

    @property
    def schedule(self) -> str:
        """Sorted set of delayed jobs, scored by the time they are due (ms)."""
        return f"{self.queue}:schedule"

    @property
    def due(self) -> str:
        """When the earliest delayed job or retry of the queue is due (ms, Redis clock); absent
        when none is. Lets the masters' housekeeping find nothing due with one GET."""
        return f"{self.queue}:due"

    @property
    def periodic(self) -> str:
        """Hash of the queue's periodic schedules: name -> ``<last tick ms>|<definition>``,
        moved forward only by the script that enqueues the tick's job."""
        return f"{self.queue}:periodic"

    @property
    def sweeper(self) -> str:
        """Short lease naming the worker that runs this interval's sweep."""
        return f"{self.queue}:sweeper"

    @property
    def visibility(self) -> str:
        """The visibility timeout (ms) the queue's live workers share; expires with them."""
        return f"{self.queue}:visibility"

    @property
    def workers(self) -> str:
        """Sorted set of worker ids scored by their last heartbeat (ms)."""
        return f"{self.queue}:workers"

    def job(self, job_id: str) -> str:
        """Status record of one job that stores its result (a hash; it expires)."""
        return f"{self.queue}:job:{job_id}"

    def steps(self, job_id: str) -> str:
        """A resumable job's steps and cursors (a hash: :mod:`taskq.checkpoint`); it lives
        while the job does and expires ``result_ttl_s`` after the job ends."""
        return f"{self.queue}:steps:{job_id}"

    def done(self, job_id: str) -> str:
        """A one-element list that appears when the job ends: ``result()`` blocks on it."""
        return f"{self.queue}:done:{job_id}"

    def limit(self, task: str, key: str | None = None) -> str:
        """A task's rate-limit window (a sorted set of start slots; per ``limit_key`` if the
        task has one)."""
        return f"{self.queue}:limit:{task}" + (f":{key}" if key is not None else "")

    def running(self, task: str, key: str | None = None) -> str:
        """A concurrency-limited task's running slots: members ``<worker id>|<job id>``."""
        return f"{self.queue}:running:{task}" + (f":{key}" if key is not None else "")

    def held(self, task: str, key: str | None = None) -> str:
        """Jobs of a concurrency-limited task waiting for a slot, out of their stream, in
        arrival order (schedule members)."""
        return f"{self.queue}:held:{task}" + (f":{key}" if key is not None else "")

    def unique(self, key: str) -> str:
        """Uniqueness lock of one key: the id of the job holding it (``SET NX PX``)."""
        return f"{self.queue}:unique:{key}"

    def debounce(self, key: str) -> str:
        """A debounce burst of one key: a hash {job, member, first} naming the burst's job
        waiting in the schedule (as ``member``) and when the burst began (ms); it expires
        after the job is due."""
        return f"{self.queue}:debounce:{key}"

    def follow_up(self, key: str) -> str:
        """The one follow-up job of a ``keep_last`` unique key whose job runs:
        ``<job id>\n<hold ms>\n<priority index>\n<task>\n<body>``; it expires with the
        lock."""
        return f"{self.queue}:keeplast:{key}"

    @property
    def gathering(self) -> str:
        """Sorted set of the queue's debounce bursts and filling batches, for inspect and the
        dashboard: members ``debounce:<key>`` and ``batch:<task>:<key>`` (their keys without
        the queue's prefix), scored by when each is due (ms); a member whose burst or batch
        has gone is stale (readers skip it; a day later the scripts drop it)."""
        return f"{self.queue}:gathering"

    def batch(self, task: str, key: str) -> str:
        """The calls of a batching task waiting for their batch, per ``batch_key``: a list of
        ``<call id>\n<body>`` in enqueue order, emptied into one job when full or due; it
        expires a week after its last call if no worker runs it."""
        return f"{self.queue}:batch:{task}:{key}"

    def batch_call(self, call_id: str) -> str:
        """The batch job a batched call joined (its id), for ``app.job(call id)`` and
        ``taskq job``: written by ``batch.lua`` for every call but a batch's first (whose id
        is the batch's), only for a task that keeps a record; expires with that record's
        first TTL (the batch's wait and the result TTL, from the call)."""
        return f"{self.queue}:batchcall:{call_id}"

    def cancel(self, job_id: str) -> str:
        """Tombstone of a delivered job asked to stop (``job.cancel(terminate=True)``); its
        worker's master interrupts the run. Expires with the job's record."""
        return f"{self.queue}:cancel:{job_id}"

    def progress(self, job_id: str) -> str:
        """A running task's latest progress (a hash: ``done``, ``total``, ``message``,
        ``updated_ms``, ``attempt``); it expires (docs/telemetry.md)."""
        return f"{self.queue}:progress:{job_id}"

    def output(self, job_id: str) -> str:
        """A job's output stream: one entry per ``emit`` (``a`` attempt, ``c`` msgpack
        chunk), capped by length, closed by an ``end`` entry; it expires."""
        return f"{self.queue}:output:{job_id}"

    def logs(self, job_id: str) -> str:
        """A job's kept log records (a list of msgpack ``[level, time ms, message,
        attempt]``), capped by bytes; it expires."""
        return f"{self.queue}:logs:{job_id}"

    def logsize(self, job_id: str) -> str:
        """The byte count of :meth:`logs` and how many records were dropped (a hash:
        ``bytes``, ``dropped``); it expires with them."""
        return f"{self.queue}:logsize:{job_id}"

    @property
    def audit(self) -> str:
        """The control plane's audit stream: who paused, resumed, changed a limit or
        cancelled a job, from where, and what (capped; trimmed by its writers)."""
        return f"{self.queue}:audit"

    @property
    def paused(self) -> str:
        """Hash of the queue's pauses (``taskq.pauses.Pause.field`` -> when it began, ms);
        no TTL: a pause lasts until it is resumed."""
        return f"{self.queue}:paused"

    @property
    def limits(self) -> str:
        """Hash of the limits set at run time (``taskq limit set``): ``<len(task)>:<task>:<key>``
        -> JSON ``{"rate", "concurrency"}``; no TTL: they last until cleared."""
        return f"{self.queue}:limits"

    def aside(self, pause_field: str) -> str:
        """The jobs a worker set aside under one pause, out of their stream, oldest first
        (members as in the schedule): a ``held`` set, so a cancel finds them there."""
        return f"{self.queue}:held:paused:{pause_field}"

    @property
    def cancelled(self) -> str:
        """Tombstones of cancelled jobs that keep no record (a hash: job id ->
        ``<keep until ms>|<terminate 0/1>``); the worker that meets such a job ends it."""
        return f"{self.queue}:cancelled"

    @property
    def ended(self) -> str:
        """Jobs without a record that ended cancelled or expired (a sorted set: member
        ``<state>:<job id>``, scored by when it is forgotten), for their status."""
        return f"{self.queue}:ended"

    @property
    def counts(self) -> str:
        """Hash of the queue's ``expired`` and ``cancelled`` job counts (for inspect)."""
        return f"{self.queue}:counts"

    def chord(self, chord_id: str) -> str:
        """A chord's state while its header runs: header results by index, and its body."""
        return f"{self.queue}:chord:{chord_id}"

    def flow(self, flow_id: str) -> str:
        """A workflow's record: its kind, its steps, the jobs whose results are its result."""
        return f"{self.queue}:flow:{flow_id}"

    def series(self, minute_ms: int) -> str:
        """Job counts of one minute (a hash: worker id -> ``processed failed retried dead``
        in that minute), written by worker masters for the dashboard's charts; it expires."""
        return f"{self.queue}:series:{minute_ms}"

    def bulk(self, bulk_id: str) -> str:
        """The progress of one of the dashboard's "all that match" actions (a hash: what it
        does and how far it got), so every dashboard process, and a reloaded page, shows it;
        it expires a day after its last update."""
        return f"{self.queue}:bulk:{bulk_id}"

    def task_stats(self, span: str, start_ms: int) -> str:
        """Per-task run summaries of one minute (``span`` ``m``) or hour (``h``): a hash task
        name -> msgpack summary (runs, failures, retries, durations), merged by
        ``taskstats.lua`` from what worker masters take from their children at each
        heartbeat; it expires."""
        return f"{self.queue}:taskstats:{span}:{start_ms}"

    def fair_staged(self, priority: str, fair_key: str) -> str:
        """A fair queue's jobs of one fairness key and priority that wait for their turn, out
        of the stream, oldest first (a list of msgpack entry field arrays); up to the key's
        weight of them enter the stream at each of its turns (docs/fairness.md)."""
        return f"{self.queue}:fair:{priority}:k:{fair_key}"

    def fair_turns(self, priority: str) -> str:
        """List of a fair queue's keys with jobs staged in one priority, each once, in turn
        order: a turn admits the first key's jobs and moves it to the end."""
        return f"{self.queue}:fair:{priority}:turns"

    def fair_staged_count(self, priority: str) -> str:
        """How many jobs of one priority a fair queue holds staged (all keys): kept by every
        script that stages or admits one, for the waiting figures of inspect and the
        autoscaling signal (which read it instead of every key's list)."""
        return f"{self.queue}:fair:{priority}:staged"

    @property
    def fair_waiting(self) -> str:
        """Sorted set of a fair queue's active keys (those with staged jobs, any priority),
        each scored at least its staged jobs (admitting does not lower it; workers' recounts
        set the top ones exact): inspect's active keys and top keys, paged with ZSCAN."""
        return f"{self.queue}:fair:waiting"

    @property
    def fair_mode(self) -> str:
        """``on`` while the queue is fair (set by its fair workers; ``taskq fair off`` clears
        it after moving the staged jobs into the streams): producers stage only when it is."""
        return f"{self.queue}:fair:mode"

    @property
    def fair_weights(self) -> str:
        """Hash of the queue's fairness weights set at run time: key -> integer weight (1 is
        the default and is not stored); no TTL. Apart from ``fair:*`` so that the ACL lets
        producers stage jobs without changing weights."""
        return f"{self.queue}:fairweights"

    def worker(self, worker_id: str) -> str:
        """Heartbeat record of one worker (expires when the worker stops beating)."""
        return f"{self.queue}:worker:{worker_id}"
