"""Least-privilege Redis users: the ``ACL SETUSER`` line of each role on some queues.

A role is the set of commands one kind of process really sends, found by running every
operation of that kind as a user with exactly these rights and reading ``ACL LOG``
(``tests/integration/test_acl.py`` keeps it so). Commands a Lua script runs are checked
against the caller's rights too, so each list includes what its scripts run. See
docs/security.md for why each permission is there and what a role can still do.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from taskq.errors import ConfigError
from taskq.keys import QueueKeys

SCRIPTS = ("evalsha", "script|load")
"""taskq runs its Lua scripts by SHA1 and loads one Redis does not know (a new or restarted
server) itself; no other process loads them, so every role that runs a script may load it."""

DATABASE = ("select",)
"""redis-py sends SELECT for a URL's database number above 0 (ACLs do not limit databases)."""

PRODUCER_COMMANDS = (
    "xadd",  # a job without a record goes to its stream (and MAXLEN 0 trims it: docs/security.md)
    *SCRIPTS,  # a job with a record, a delayed job, a unique job, a workflow: one script each
    "hset",  # in those scripts: the job's status record
    "pexpire",  # ... which expires after result_ttl_s
    "hget",  # ... a workflow step's record, read as the workflow starts
    "zadd",  # ... a delayed job joins the schedule
    "get",  # ... the schedule's due key, a unique job's lock
    "set",  # ... lowered due key, the lock taken (NX PX)
    "hmget",  # ... a debounce burst's job and member
    "zscore",  # ... whether that member still waits in the schedule
    "zrem",  # ... which the burst's next enqueue replaces
    "xinfo|groups",  # ... whether a keep_last key's job was taken (runs)
    "rpush",  # ... a batched call joins its batch's list
    "lindex",  # ... whose first call names the batch job
    "llen",  # ... a full batch
    "lpop",  # ... leaves the list for its stream
    "zremrangebyscore",  # ... the gathering index (inspect) drops members stale for a day
    "time",  # the Redis clock: scripts and job.status()
    "hgetall",  # job.status(), job.result(): the record
    "xpending",  # job.status(): a job taken, not yet marked running by its master
    "exists",  # app.job(id), app.flow(id): which queue holds the record
    "blmove",  # job.result(): blocks on the job's done list
    "wait",  # durable_enqueue: a replica has the job
    "zincrby",  # a fair queue: its key's waiting jobs (staging uses rpush, llen, lpop too)
    "incrby",  # ... and its staged count
    # ... a key's turn, when the enqueue finds the stream idle and admits at once (lrange,
    # lpop, rpush: the turns; zrem: a key left without staged jobs leaves the waiting keys)
    # job.progress(), job.stream(), job.logs(): a job's telemetry keys, read only
    "xread",
    "lrange",
    *DATABASE,
)

WORKER_COMMANDS = (
    *SCRIPTS,
    *DATABASE,
    "ping",  # waiting for Redis at start
    "time",
    # the job streams: reads, acks, hand-backs, crash recovery, trims of finished entries
    "xreadgroup",
    "xack",
    "xadd",
    "xdel",
    "xtrim",
    "xrange",
    "xrevrange",  # a partitioned queue's look: each stream's newest entry
    "xlen",
    "xpending",
    "xclaim",  # lease renewal (JUSTID)
    "xautoclaim",  # the sweep takes back the jobs of dead workers
    "xgroup|create",
    "xgroup|delconsumer",  # consumers of dead workers are forgotten
    "xinfo|groups",
    "xinfo|consumers",
    # the schedule, retry sets, rate-limit windows, concurrency slots, the worker registry
    "zadd",
    "zrem",
    "zrange",
    "zrangebyscore",
    "zremrangebyscore",
    "zcard",
    "zcount",  # a rate-limited start: the starts already in its window
    "zscore",
    "zpopmin",
    # status records, chord states, periodic schedules, heartbeats, leases, locks
    "hset",
    "hsetnx",
    "hget",
    "hmget",
    "hgetall",
    "hdel",
    "hincrby",
    "get",
    "set",
    "del",
    "exists",
    "pexpire",
    "rpush",  # a job's done list: wakes job.result() waiters
    "lpop",  # telemetry_logs.lua: a job's oldest log records past its byte cap
    "multi",  # a stopping worker leaves the registry in one transaction
    "exec",
    "hexists",  # setting a paused job aside: is its pause still in force?
    "pttl",  # the end of a cancelled or expired job without a record: how long it is kept
    "llen",  # a due batch (promote.lua)
    "lpop",  # ... leaves its list for its stream
    "zincrby",  # a fair queue's staging (a due delayed job, a periodic tick): its key's rank
    "incrby",  # ... and its staged count
    "lrange",  # ... a round of turns (lpop, rpush: the keys turned; zrem: a key left without
    # staged jobs; zrange, zadd: the top keys' ranks made exact, fair_recount.lua)
    "lrem",  # ... a cancelled staged job (and its key's turn, if it was the last)
)

OPERATOR_COMMANDS = (
    *SCRIPTS,
    *DATABASE,
    "ping",  # taskq inspect ping
    "time",
    # taskq inspect, taskq job, taskq deadletter list/show, taskq periodic list: reads
    "xrange",
    "xrevrange",
    "xlen",
    "xpending",
    "xinfo|groups",
    "zrange",
    "zcard",
    "zscan",  # taskq inspect --json: a fair queue's keys, a page at a time
    "scan",  # taskq jobs search, the dashboard's search: status records, a page at a time
    "zcount",  # taskq scale: delayed jobs and retries due within the horizon
    "hgetall",
    "hmget",
    "hget",
    "exists",
    "pttl",  # how long each worker's heartbeat has left
    "blmove",  # taskq job ID --wait
    "xread",  # taskq job ID --follow, the dashboard's live view: a job's output
    "lrange",  # ... and its logs
    "llen",  # taskq job ID --json: how many log records it kept
    # taskq deadletter retry/purge, taskq purge: streams
    "xadd",
    "xdel",
    "xack",
    "xtrim",
    "del",
    "multi",  # deadletter purge counts and deletes in one transaction
    "exec",
    # taskq job cancel: the record, the schedule and retry sets, a unique job's lock
    "hset",
    "hdel",
    "hincrby",
    "pexpire",
    "rpush",
    "zrangebyscore",
    "zrem",
    "zpopmin",  # a cancelled job passes the slot kept for it to the next held job
    "get",
    "set",  # the tombstone of a running job (--terminate)
    "zadd",  # a job without a record, found and cancelled: its end, kept for its status;
    # taskq jobs retry (jobs_retry_now.lua): a delayed job or retry made due now
    "zscore",
    "zremrangebyscore",  # ... and the ends kept past their time go
    # taskq pause / resume: the pause, and the jobs set aside under it back to their streams
    "hsetnx",
    "acl|whoami",  # the user an audit entry names (pause, resume, limits, cancel)
    # taskq inspect gathering (and the overview): the bursts and batches waiting
    "llen",
    "lindex",
    # a fair queue's staged jobs: cancelled (a key left without any leaves the turns), fair off
    "lpop",
    "lrem",
    "zincrby",
    "incrby",
)


def _all_keys(k: QueueKeys) -> tuple[str, ...]:
    return (f"{k.queue}:*",)


def _worker_keys(k: QueueKeys) -> tuple[str, ...]:
    """Every key of the queue but the audit stream, the pauses and run-time limits only to
    read (``%R~``): a worker obeys them (and sets jobs aside under a pause), but cannot
    pause, resume or set a limit."""
    q = k.queue
    kinds: tuple[str, ...] = ("retry", "worker", "series", "job", "done", "chord", "cancel")
    kinds += ("limit", "running", "held", "unique", "flow", "steps", "taskstats")
    kinds += ("debounce", "keeplast", "batch", "batchcall")  # flow control (tasks enqueue too)
    kinds += ("progress", "output", "logs", "logsize")  # a job's telemetry
    names: tuple[str, ...] = (k.deadletter, k.schedule, k.due, k.visibility, k.sweeper)
    names += (k.workers, k.counts, k.periodic, k.cancelled, k.ended, k.gathering)
    kinds += ("fair",)  # a fair queue's staged jobs, turns, waiting keys and mark
    read_only = (f"%R~{k.paused}", f"%R~{k.limits}", f"%R~{k.fair_weights}")
    return (*k.streams, *names, *(f"{q}:{kind}:*" for kind in kinds), *read_only)


def _producer_keys(k: QueueKeys) -> tuple[str, ...]:
    """The keys an enqueue and a result read touch, and a job's telemetry (read): never the
    dead letters, retry sets, limits, periodic schedules or the worker registry."""
    ids: tuple[str, ...] = ("job", "done", "unique", "chord", "flow")
    ids += ("debounce", "keeplast", "batch", "batchcall")  # flow control at enqueue
    ids += ("steps",)  # read by job.status()
    ids += ("progress", "output", "logs", "logsize")  # read by job.progress(), stream(), logs()
    ids += ("fair",)  # a fair queue's staged jobs, turns and waiting keys (read: its mark)
    keys = (*k.streams, k.schedule, k.due, k.gathering)
    return (*keys, *(f"{k.queue}:{kind}:*" for kind in ids), f"%R~{k.fair_weights}")


@dataclass(frozen=True)
class Role:
    """A kind of taskq process and the rights it needs on each of its queues."""

    name: str
    commands: tuple[str, ...]
    key_patterns: Callable[[QueueKeys], tuple[str, ...]]


ROLES = {
    r.name: r
    for r in (
        Role("producer", PRODUCER_COMMANDS, _producer_keys),
        Role("worker", WORKER_COMMANDS, _worker_keys),
        Role("operator", OPERATOR_COMMANDS, _all_keys),
    )
}


def default_user(role: str) -> str:
    return f"taskq-{role}"


def password_hash(password: str) -> str:
    """The ``#<sha256>`` rule: Redis stores only this, so the line carries no password."""
    return "#" + hashlib.sha256(password.encode()).hexdigest()


def setuser_args(
    role: str,
    queues: Sequence[str],
    *,
    user: str | None = None,
    password: str | None = None,
    read_only_rules: bool = True,
) -> list[str]:
    """``ACL SETUSER`` and its arguments for a ``role`` on ``queues``.

    ``reset`` first, so running the line again replaces the user whole; ``resetchannels``
    again after it because Redis 6.2's ``reset`` grants every channel (acl-pubsub-default).
    Without ``password`` the user is on but nobody can log in as it until one is added.
    ``read_only_rules=False`` (Redis 6.2, which has no ``%R~`` key rules) grants the keys a
    role may only read as plain ``~`` patterns: the worker can then also write the pauses
    and run-time limits (docs/security.md).

    Raises:
        ConfigError: an unknown role, no queue, or a user or queue name that cannot be
            written on one line (spaces, quotes).
    """
    if role not in ROLES:
        raise ConfigError(f"unknown role {role!r}; use one of {', '.join(ROLES)}")
    if not queues:
        raise ConfigError("give at least one queue")
    r, name = ROLES[role], user or default_user(role)
    _check_word("user name", name)
    patterns = []
    for queue in dict.fromkeys(queues):
        _check_word("queue name", queue)
        keys = r.key_patterns(QueueKeys(_glob_escape(queue)))
        patterns += [_pattern(p, read_only_rules) for p in keys]
    secret = [password_hash(password)] if password else []
    rules = ["reset", "on", *secret, "resetchannels", *patterns, "-@all"]
    return ["ACL", "SETUSER", name, *rules, *(f"+{c}" for c in r.commands)]


def setuser_line(
    role: str,
    queues: Sequence[str],
    *,
    user: str | None = None,
    password: str | None = None,
    read_only_rules: bool = True,
) -> str:
    """:func:`setuser_args` as one line for ``redis-cli``."""
    args = setuser_args(role, queues, user=user, password=password, read_only_rules=read_only_rules)
    return " ".join(args)


def _pattern(key: str, read_only_rules: bool) -> str:
    """A key pattern as an ACL rule: ``~<pattern>`` (read and write) unless it says its
    access already (``%R~``, kept where the server knows it)."""
    if key.startswith("%"):
        return key if read_only_rules else "~" + key.split("~", 1)[1]
    return f"~{key}"


def _glob_escape(name: str) -> str:
    """A queue name as a literal in a Redis glob pattern."""
    return "".join("\\" + c if c in "*?[]\\" else c for c in name)


def _check_word(what: str, value: str) -> None:
    if not value or not value.isprintable() or any(c.isspace() or c in "\"'" for c in value):
        raise ConfigError(f"invalid {what} {value!r}: no spaces or quotes in an ACL line")
