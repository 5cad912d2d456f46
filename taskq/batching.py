"""Batching by key: calls of a task accumulate and run as one job.

``@app.task(batch_size=100, batch_wait_s=2.0, batch_key=lambda user_id, **_: user_id)``:
each call joins the batch of its key (one batch per task and queue without ``batch_key``);
a batch runs as one job when it holds ``batch_size`` calls or ``batch_wait_s`` after its
first call, whichever comes first. The task receives one argument, the list of the calls
in enqueue order, each ``{"args": [...], "kwargs": {...}, "id": call id}``.

Each call is one script (``batch.lua``): it appends the call's body, as the producer wrote
(and signed) it, to the batch's list, and a full batch leaves the list for its stream in the
same step; a due one leaves it in the schedule's mover (``promote.lua``), so every call is in
exactly one batch job. The batch job's body holds the calls' bodies unchanged, and the worker
verifies each (a forged call is refused). Its id is its first call's: every call returns
the handle of the batch job it joined, whose result is the batch's. A batch job that fails
retries as a whole, with the same calls.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from taskq.broker.enqueue import batch_command
from taskq.broker.replies import as_int, text
from taskq.broker.steps import Steps
from taskq.errors import BrokerError, ConfigError
from taskq.job import Job
from taskq.keys import QueueKeys
from taskq.message import Message
from taskq.unique import check_key

if TYPE_CHECKING:
    from taskq.protocols import Producer, TaskLike

DEFAULT_KEY = "-"
"""The one batch key of a task without ``batch_key``."""
LIST_TTL_MS = 7 * 86_400_000
"""How long a batch's list outlives its last call if no worker runs it (a week)."""
CALL_OPTIONS = frozenset({"queue"})
"""The ``apply_async`` options a call of a batching task takes (the rest are the batch's)."""


@dataclass(frozen=True)
class Batch:
    """The batch a call joins: its list in Redis, its size and its wait (ms)."""

    key: str
    size: int
    wait_ms: int


def batching(task: TaskLike, msg: Message, options: dict[str, Any]) -> Batch:
    """The batch of a call of a batching task.

    Raises:
        ConfigError: an option a batched call does not take, or a ``batch_key`` function that
            raises or returns something else than a string of 1 to 200 characters.
    """
    o = task.options
    other = sorted(
        name for name, v in options.items() if v is not None and name not in CALL_OPTIONS
    )
    if other:
        raise ConfigError(f"{task.name} batches its calls: it takes no {', '.join(other)}")
    key = DEFAULT_KEY
    if o.batch_key is not None:
        try:
            key = o.batch_key(*msg.args, **msg.kwargs)
        except Exception as exc:
            raise ConfigError(f"{task.name}: batch_key function raised {exc!r}") from exc
        check_key(key, "batch_key")
    assert o.batch_size is not None and o.batch_wait_s is not None  # (a batching task's)
    wait_ms = max(1, int(o.batch_wait_s * 1000))
    return Batch(QueueKeys(msg.queue).batch(task.name, key), o.batch_size, wait_ms)


def batch_steps(app: Producer, msg: Message, b: Batch) -> Steps[Job]:
    """Add the call to its batch; the handle of the batch job (due when the batch is)."""
    command = batch_command(b.key, msg, app.encode(msg), b.size, (b.wait_ms, LIST_TTL_MS))
    [reply] = yield [command]
    if not isinstance(reply, list) or len(reply) != 4 or not text(reply[0]):
        raise BrokerError(f"batch: unexpected reply {reply!r:.200}")
    due_ms = None if as_int(reply[3]) else as_int(reply[2]) or None
    return Job(text(reply[0]), msg.task, msg.queue, msg.priority, None, due_ms, msg.recorded, app)


def eager_call(msg: Message) -> Message:
    """In eager mode a call runs at once, as a batch of one."""
    call = {"args": list(msg.args), "kwargs": msg.kwargs, "id": msg.id}
    return msg._replace(args=([call],), kwargs={})
