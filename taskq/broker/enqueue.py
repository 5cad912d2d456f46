"""The producer's commands: a job to its stream, or a delayed one to the schedule; a job
that keeps a status record goes with its record, in one script."""

from __future__ import annotations

from taskq.broker.link import script_command
from taskq.broker.resp import Command
from taskq.keys import PRIORITIES, QueueKeys, stream_key
from taskq.message import Message
from taskq.results import encode_args


def publish_command(msg: Message, body: bytes) -> Command:
    """XADD the job to its priority stream (``enqueue.lua`` when it keeps a record)."""
    if msg.result_ttl_s is None:
        return ("XADD", stream_key(msg.queue, msg.priority), "*", "task", msg.task, "body", body)
    k = QueueKeys(msg.queue)
    keys = [k.stream(msg.priority), k.job(msg.id), k.done(msg.id)]
    args = [msg.task, body, msg.id, msg.result_ttl_s * 1000, msg.queue, msg.priority]
    return script_command("enqueue", keys, [*args, encode_args(msg.args, msg.kwargs)])


def schedule_command(msg: Message, body: bytes, in_ms: int | None) -> Command:
    """Add a delayed job to the schedule: due ``in_ms`` after Redis receives it, or at
    ``msg.eta_ms``."""
    member = b"%d\n%s\n%s" % (PRIORITIES.index(msg.priority), msg.task.encode(), body)
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
