"""The store a worker's runs keep their steps and cursors in (:mod:`taskq.resumable`): the
job's steps hash in Redis, written only while the run holds the job's entry."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from taskq import resumable
from taskq.broker.checkpoints import Checkpoints
from taskq.checkpoint import CheckpointError
from taskq.context import JobContext
from taskq.worker.consumer import Consumer

LIVE_TTL_MS = 7 * 86_400_000
"""The steps hash lives at least this long while its job does (refreshed by every write), so
that a retry's backoff or a long wait in the queue after a hand-back does not lose it."""


class RedisStore:
    """A :class:`taskq.resumable.Store` on the runs of one consumer."""

    def __init__(self, consumer: Consumer) -> None:
        settings = consumer.executor.app.settings
        self._consumer = consumer
        self._checkpoints = Checkpoints(consumer.broker.link, consumer.name)
        self.max_value_bytes = settings.max_result_bytes
        self.checkpoint_every_items = settings.checkpoint_every_items
        self.checkpoint_every_ms = settings.checkpoint_every_ms
        self._live_ttl_ms = max(LIVE_TTL_MS, settings.result_ttl_s * 1000)

    def begin(self, job: JobContext, field: str, value_field: str, mark: bytes) -> bytes | None:
        return self._checkpoints.write(
            _where(job), {field: mark}, ttl_ms=self._live_ttl_ms, unless=value_field
        )

    def read(self, job: JobContext, field: str) -> bytes | None:
        return self._checkpoints.read(job.queue, job.id, field)

    def write(self, job: JobContext, fields: dict[str, bytes]) -> None:
        self._checkpoints.write(_where(job), fields, ttl_ms=self._live_ttl_ms)

    def max_run_s(self, task: str) -> float | None:
        return self._consumer.executor.app.get_task(task).options.max_run_s

    def stopping(self) -> bool:
        return self._consumer.stopping


@contextlib.contextmanager
def checkpointing(consumer: Consumer) -> Iterator[None]:
    """The consumer's runs keep their steps and cursors in Redis while the block runs."""
    previous = resumable.bind(RedisStore(consumer))
    try:
        yield
    finally:
        resumable.bind(previous)


def _where(job: JobContext) -> tuple[str, str, str, str]:
    if job.entry_id is None:
        raise CheckpointError(f"job {job.id}: a run without a stream entry cannot checkpoint")
    return job.queue, job.priority, job.id, job.entry_id
