"""A resumable job's steps hash in Redis: the fenced writes of the run that holds the job
(``checkpoint.lua``), the reads of later runs, and the TTL its end sets."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from taskq.broker.link import Link
from taskq.checkpoint import StaleRun
from taskq.keys import GROUP, QueueKeys


class Checkpoints:
    """The steps hashes of the jobs one consumer (``owner``) runs."""

    def __init__(self, link: Link, owner: str) -> None:
        self.link = link
        self.owner = owner

    def write(
        self,
        where: tuple[str, str, str, str],
        fields: Mapping[str, bytes],
        *,
        ttl_ms: int,
        unless: str = "",
    ) -> bytes | None:
        """Write ``fields`` to the job's steps hash if its entry is still pending under this
        consumer; with ``unless``, only if that field is absent (its value is returned then).

        Args:
            where: queue, priority, job id and entry id of the run.

        Raises:
            StaleRun: the entry is no longer pending under this consumer.
        """
        queue, priority, job_id, entry_id = where
        k = QueueKeys(queue)
        args: list[Any] = [GROUP, entry_id, self.owner, ttl_ms, unless]
        for name, value in fields.items():
            args += (name, value)
        reply = self.link.script("checkpoint", [k.stream(priority), k.steps(job_id)], args)
        if reply == 0:
            raise StaleRun(
                f"job {job_id}: this run no longer holds the job (its lease was lost), "
                "so its steps and cursors are not saved"
            )
        return reply if isinstance(reply, bytes) else None

    def read(self, queue: str, job_id: str, field: str) -> bytes | None:
        """One field of the job's steps hash."""
        reply = self.link.call("HGET", QueueKeys(queue).steps(job_id), field)
        return reply if isinstance(reply, bytes) else None

    def expire(self, queue: str, job_id: str, ttl_ms: int) -> None:
        """The job ended: its steps hash lives ``ttl_ms`` more."""
        self.link.call("PEXPIRE", QueueKeys(queue).steps(job_id), ttl_ms)
