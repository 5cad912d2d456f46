"""Debounced jobs: a burst of enqueues of one key runs once, with the last arguments.

``apply_async(debounce_key=K, debounce_s=1.0, debounce_max_wait_s=5.0)``: the first enqueue
of K adds a job to the schedule, due ``debounce_s`` later; every further enqueue of K while
that job waits replaces its body with its own and moves it to ``now + debounce_s``, but never
later than ``debounce_max_wait_s`` after the burst's first enqueue. Once the job has been moved
to its stream, the next enqueue of K begins a new burst. Every call of a burst returns the
handle of the burst's one job.

One script (``debounce.lua``) does each step. The body it stores is the producer's, swapped
whole, so a signed body stays verifiable. Its id must be the burst's: a call that does not
know the burst's id yet sends its body with a fresh one, is told the burst's, and sends the
body again with it (a burst's later calls from one process guess it right the first time).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from taskq.broker.enqueue import debounce_command
from taskq.broker.replies import as_int
from taskq.broker.resp import Command
from taskq.broker.steps import Steps
from taskq.errors import ConfigError
from taskq.job import Job
from taskq.keys import QueueKeys
from taskq.message import Message, now_ms
from taskq.options import check_debounce_times
from taskq.unique import Uniqueness, adopting_steps, check_key

if TYPE_CHECKING:
    from taskq.protocols import Producer, TaskLike

_KNOWN_IDS: dict[str, tuple[str, int]] = {}
"""Per burst key, the last job id this process saw and when that job was due (ms): while
it waits, the id is a guess that saves a round trip (a wrong guess costs one)."""
_KNOWN_IDS_MAX = 4096


@dataclass(frozen=True)
class Debounce:
    """A call's burst: its key in Redis, the debounce and the longest wait (ms)."""

    burst: str
    debounce_ms: int
    max_wait_ms: int


def debouncing(
    task: TaskLike,
    msg: Message,
    *,
    key: str | None,
    debounce_s: float | None,
    max_wait_s: float | None,
) -> Debounce | None:
    """The burst an ``apply_async`` call joins (None: it is not debounced): its
    ``debounce_key``, else the task's ``debounce_key`` function of the call's arguments.

    Raises:
        ConfigError: times without a key, a bad key or time, or a key function that raises
            or returns something else than a string.
    """
    o = task.options
    if key is None and o.debounce_key is not None:
        try:
            key = o.debounce_key(*msg.args, **msg.kwargs)
        except Exception as exc:
            raise ConfigError(f"{task.name}: debounce_key function raised {exc!r}") from exc
    if key is None:
        if debounce_s is not None or max_wait_s is not None:
            raise ConfigError(
                f"{task.name}: debounce_s and debounce_max_wait_s need a debounce_key"
            )
        return None
    check_key(key, "debounce_key")
    debounce = debounce_s if debounce_s is not None else o.debounce_s
    if debounce is None:
        raise ConfigError(f"{task.name}: debounce_key needs debounce_s")
    wait = max_wait_s if max_wait_s is not None else o.debounce_max_wait_s
    debounce, wait = check_debounce_times(debounce, wait)
    burst = QueueKeys(msg.queue).debounce(key)
    return Debounce(burst, max(1, int(debounce * 1000)), max(1, int(wait * 1000)))


def debounce_steps(app: Producer, msg: Message, d: Debounce, u: Uniqueness | None) -> Steps[Job]:
    """Add ``msg`` to its burst (or begin one); the handle of the burst's job, or of the
    holder of ``u``'s lock if a new burst finds it held."""
    if u is not None and u.keep_last:
        raise ConfigError("debounce_key does not go with unique_mode keep_last")
    if u is not None and u.released_at_end:
        msg = msg._replace(unique=u.lock)
    lock = (u.lock, u.hold_ms, u.released_at_end) if u is not None else None
    times = (d.debounce_ms, d.max_wait_ms)

    def command_of(m: Message, body: bytes, adopted: bool) -> Command:
        return debounce_command(d.burst, m, body, times, adopted, lock)

    known, known_due_ms = _KNOWN_IDS.get(d.burst, (None, 0))
    guess = known if now_ms() < known_due_ms else None  # (a job that is due has started)
    status, job_id, reply, msg = yield from adopting_steps(app, msg, command_of, guess)
    if status == "held":
        return Job(job_id, msg.task, msg.queue, msg.priority, stores_result=msg.recorded, app=app)
    due_ms = as_int(reply[2]) if len(reply) > 2 else 0
    _remember(d.burst, job_id, due_ms)
    return Job(job_id, msg.task, msg.queue, msg.priority, None, due_ms or None, msg.recorded, app)


def _remember(burst: str, job_id: str, due_ms: int) -> None:
    if len(_KNOWN_IDS) >= _KNOWN_IDS_MAX:
        _KNOWN_IDS.clear()
    _KNOWN_IDS[burst] = (job_id, due_ms)
