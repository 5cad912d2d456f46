"""The producer's commands: a job to its stream, or a delayed one to the schedule; a job
that keeps a status record goes with its record, in one script."""

from __future__ import annotations

from taskq.broker.link import script_command
from taskq.broker.resp import Command
from taskq.keys import PRIORITIES, QueueKeys, stream_key
from taskq.message import Message
from taskq.storing import encode_args


def publish_command(msg: Message, body: bytes) -> Command:
    """XADD the job to its priority stream (``enqueue.lua`` when it keeps a record;
    ``fair_enqueue.lua`` on a fair queue)."""
    if msg.fair_key is not None:
        return fair_publish_command(msg, body, msg.fair_key)
    if msg.result_ttl_s is None:
        return ("XADD", stream_key(msg.queue, msg.priority), "*", "task", msg.task, "body", body)
    k = QueueKeys(msg.queue)
    keys = [k.stream(msg.priority), k.job(msg.id), k.done(msg.id)]
    args = [msg.task, body, msg.id, msg.result_ttl_s * 1000, msg.queue, msg.priority]
    return script_command("enqueue", keys, [*args, encode_args(msg.args, msg.kwargs)])


def schedule_command(msg: Message, body: bytes, in_ms: int | None) -> Command:
    """Add a delayed job to the schedule: due ``in_ms`` after Redis receives it, or at
    ``msg.eta_ms``."""
    member = schedule_member(msg, body, fair=True)
    at = "" if in_ms is not None else msg.eta_ms
    k = QueueKeys(msg.queue)
    keys, args = [k.schedule, k.due], [at, in_ms or 0, member]
    if msg.result_ttl_s is not None:
        keys += [k.job(msg.id), k.done(msg.id)]
        args += [msg.result_ttl_s * 1000, msg.task, msg.queue, msg.priority]
        args.append(encode_args(msg.args, msg.kwargs))
    return script_command("schedule", keys, args)


def unique_command(
    keys: list[str], job_id: str, hold_ms: int, ops: bytes, record_at: int, releases: bool
) -> Command:
    """``unique.lua``: take the lock (``keys[0]``) and enqueue the job (the ops), unless the
    lock is held; its reply is the holder's id."""
    return script_command("unique", keys, [job_id, hold_ms, ops, record_at, int(releases)])


FAIR_HEAD = b"\xc1fair\n"
"""Before a schedule member's body, the head of its fairness key: 0xc1 starts no msgpack body
(as the head of a batch's marker member)."""


def schedule_member(msg: Message, body: bytes, *, fair: bool = False) -> bytes:
    """A delayed job as the schedule holds it: ``<priority index>\\n<task>\\n<body>``. With
    ``fair``, a job with a fairness key has it before its body
    (``\\xc1fair\\n<key>\\n<body>``), so that ``promote.lua`` stages it by its key when it
    is due (docs/fairness.md); a debounce burst or a keep_last follow-up, which keep their
    own flow control, enter their stream directly."""
    if fair and msg.fair_key is not None:
        body = b"%s%s\n%s" % (FAIR_HEAD, msg.fair_key.encode(), body)
    return b"%d\n%s\n%s" % (PRIORITIES.index(msg.priority), msg.task.encode(), body)


def member_body(body: bytes) -> bytes:
    """A schedule member's body part without its fairness key (``schedule_member``)."""
    if body.startswith(FAIR_HEAD):
        return body.partition(b"\n")[2].partition(b"\n")[2]
    return body


def debounce_command(
    burst: str,
    msg: Message,
    body: bytes,
    times_ms: tuple[int, int],
    adopted: bool,
    lock: tuple[str, int, bool] | None,
) -> Command:
    """``debounce.lua``: add the job to its burst (``burst``, the burst key), or start a
    burst with it. ``times_ms`` is (debounce, max wait); ``adopted``: ``msg.id`` is the one
    the script named; ``lock``: the uniqueness lock a new burst takes (key, hold ms, whether
    the job's end releases it)."""
    k = QueueKeys(msg.queue)
    recorded = msg.result_ttl_s is not None
    record = [k.job(msg.id), k.done(msg.id)] if recorded else [burst, burst]
    keys = [burst, k.schedule, k.due, *record, lock[0] if lock else burst]
    args = [msg.id, schedule_member(msg, body), *times_ms, int(adopted), int(recorded)]
    args += [(msg.result_ttl_s or 0) * 1000, msg.task, msg.queue, msg.priority]
    args.append(encode_args(msg.args, msg.kwargs))
    args += [lock[1], int(lock[2])] if lock else ["", 0]
    return script_command("debounce", keys, args)


def keep_last_command(
    keys: list[str],
    msg: Message,
    hold_ms: int,
    ops: bytes,
    record_at: int,
    adopted: bool,
    member: bytes,
) -> Command:
    """``keeplast.lua``: take the lock (``keys[0]``) and enqueue the job (the ops), or
    return the waiting holder, or store the job as the follow-up (``keys[1]``) of the
    running one. ``adopted``: ``msg.id`` is the one the script named."""
    args = [msg.id, hold_ms, ops, record_at, int(adopted), member]
    args += [(msg.result_ttl_s or 0) * 1000, msg.task, msg.queue, msg.priority]
    return script_command("keeplast", keys, [*args, encode_args(msg.args, msg.kwargs)])


def batch_command(
    batch: str, msg: Message, body: bytes, size: int, times_ms: tuple[int, int]
) -> Command:
    """``batch.lua``: the call joins its batch (``batch``, the list), which runs as one job
    when ``size`` calls are there (at once) or when due. ``times_ms``: (the batch's wait
    from its first call, how long the list lives after its last call)."""
    k = QueueKeys(msg.queue)
    wait_ms, ttl_ms = times_ms
    args = [msg.id, body, size, wait_ms, PRIORITIES.index(msg.priority), msg.task, msg.queue]
    args += [msg.priority, (msg.result_ttl_s or 0) * 1000, ttl_ms]
    return script_command("batch", [batch, k.schedule, k.due, k.batch_call(msg.id)], args)


def fair_publish_command(msg: Message, body: bytes, fair_key: str) -> Command:
    """``fair_enqueue.lua``: the job on a fair queue, staged by its key and admitted at once
    when the stream has nothing undelivered (a plain entry while the queue is not marked
    fair)."""
    k = QueueKeys(msg.queue)
    p = msg.priority
    keys = [k.stream(p), k.fair_mode, k.fair_staged(p, fair_key), k.fair_waiting]
    args: list[object] = [msg.task, body, fair_key]
    if msg.result_ttl_s is not None:
        keys += [k.job(msg.id), k.done(msg.id)]
        args += [msg.id, msg.result_ttl_s * 1000, msg.queue, p]
        args.append(encode_args(msg.args, msg.kwargs))
    return script_command("fair_enqueue", keys, args)
