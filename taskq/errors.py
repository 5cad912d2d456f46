"""One rooted error tree, plus the control-flow exceptions a task may raise."""

from __future__ import annotations

import math


class TaskqError(Exception):
    """Root of every error taskq raises."""


class ConfigError(TaskqError):
    """A setting, an app path or a URL is wrong."""


class BrokerError(TaskqError):
    """Redis could not be reached or answered with an error.

    The broker raises one of the two subclasses, never redis-py's own errors.
    """


class BrokerUnavailable(BrokerError):
    """Redis cannot serve now: unreachable, timed out, loading, a read-only replica, out of
    memory, busy with a script. Waiting and trying again helps; workers do that.

    Attributes:
        timed_out: the command was sent and no answer came in time, so it may or may not
            have taken effect.
    """

    def __init__(self, message: str, *, timed_out: bool = False) -> None:
        super().__init__(message)
        self.timed_out = timed_out


class BrokerRefused(BrokerError):
    """Redis refused a command for good (no permission, wrong type, a script error):
    trying again does not help."""


class EnqueueError(TaskqError):
    """A job was refused at enqueue time; nothing was sent."""


class PayloadTooLarge(EnqueueError):
    """The encoded job is larger than ``max_payload_bytes``."""


class DecodeError(TaskqError):
    """A stream entry is not a valid taskq job."""

    def __init__(self, reason: str, raw: object = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.raw = raw


class TaskNotFound(TaskqError):
    """No task of that name is registered with the app."""


class ResultTimeout(TaskqError):
    """``job.result(timeout=...)`` reached its timeout before the job ended."""


class JobNotFound(TaskqError):
    """Redis holds no record of the job: never enqueued with results on, expired or forgotten."""


class TaskFailed(TaskqError):
    """The job failed for good (dead-lettered): ``job.result()`` raises this.

    Attributes:
        job_id: the job that failed.
        type: the remote exception's type name (``Rejected`` for bad input or an unknown task,
            ``WorkerLost`` for a run whose worker died).
        message: its text.
        traceback: the remote traceback ('' when none was taken).
        task: the task of the job that failed: in a workflow, the step that failed (the
            workflow's later steps never ran).
    """

    def __init__(
        self, job_id: str, type: str, message: str, traceback: str = "", *, task: str = ""
    ) -> None:
        where = f" ({task})" if task else ""
        super().__init__(f"job {job_id}{where} failed: {type}: {message}")
        self.job_id = job_id
        self.type = type
        self.message = message
        self.traceback = traceback
        self.task = task


class JobCancelled(TaskFailed):
    """The job was cancelled (``job.cancel()``): ``result()`` raises this, and a running task
    that is cancelled with ``terminate=True`` sees it raised inside its code."""

    def __init__(self, job_id: str, message: str = "the job was cancelled", *, task: str = ""):
        super().__init__(job_id, "JobCancelled", message, task=task)


class JobExpired(TaskFailed):
    """The job was not started before its ``expires`` time, so it never ran."""

    def __init__(self, job_id: str, message: str = "the job expired", *, task: str = ""):
        super().__init__(job_id, "JobExpired", message, task=task)


class ChunkTooLarge(TaskqError, ValueError):
    """``emit`` was given a chunk larger than ``output_max_chunk_bytes`` once encoded; it was
    not written (the task goes on, and may catch this)."""


class ResultError(TaskqError):
    """A task's return value cannot be stored; the job fails with this error instead."""


class UnserializableResult(ResultError):
    """The return value is not msgpack-serializable."""


class ResultTooLarge(ResultError):
    """The encoded return value is larger than ``max_result_bytes``."""


class Retry(Exception):
    """Raise inside a task to run it again later, e.g. ``raise Retry(countdown=10)``.

    It counts as an attempt; once the task's ``max_retries`` are used up the job is
    dead-lettered like any other failure.
    """

    def __init__(self, countdown: float | None = None, *, reason: str = "") -> None:
        if countdown is not None and (
            isinstance(countdown, bool)
            or not isinstance(countdown, int | float)
            or not math.isfinite(countdown)
            or countdown < 0
        ):
            # Raised from the task's own `raise Retry(...)`: the run fails with this error
            # and takes the task's normal retry path, instead of a half-made retry.
            raise ConfigError(
                f"Retry(countdown={countdown!r}): countdown must be a finite number of seconds >= 0"
            )
        super().__init__(reason or "retry requested")
        self.countdown = countdown


class Snooze(Exception):
    """Raise inside a task (or return it) to run the job again in ``seconds``, **without**
    spending an attempt: for polling an external job, or waiting on a rate-limited API.

    The job leaves its stream for the schedule (like a delayed job), its record says
    ``snoozed`` with the due time, and its attempt number stays where it was. A task's
    ``max_snoozes`` caps how often a job may snooze; the snooze past the cap dead-letters it.
    """

    def __init__(self, seconds: float = 0.0) -> None:
        if (
            isinstance(seconds, bool)
            or not isinstance(seconds, int | float)
            or not math.isfinite(seconds)
            or not 0 <= seconds <= MAX_SNOOZE_S
        ):
            raise ConfigError(
                f"Snooze({seconds!r}): seconds must be a finite number in [0, {MAX_SNOOZE_S:.0f}]"
            )
        super().__init__(f"snoozed for {seconds} s")
        self.seconds = seconds


MAX_SNOOZE_S = 366 * 86_400.0
"""The longest snooze (a year): its due time is kept in ms on the Redis clock."""


class SoftTimeLimitExceeded(Exception):
    """Raised inside a task that ran past its soft time limit."""
