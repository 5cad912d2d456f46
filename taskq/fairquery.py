"""The fair-queue reads that :class:`~taskq.App` offers (a base of App, as
:class:`~taskq.control.ControlPlane` is): a fairness key's weight and waiting jobs."""

from __future__ import annotations

from typing import TYPE_CHECKING

from taskq.broker.steps import Steps, arun, run
from taskq.config import Settings, check_queue_name
from taskq.partitions import expand

if TYPE_CHECKING:  # the reads and their view load with the first read (a worker makes none)
    from taskq.broker.alink import AsyncLink
    from taskq.broker.link import Link
    from taskq.fairview import FairKey


class FairQueries:
    """Reads of a fair queue's keys (docs/fairness.md)."""

    settings: Settings

    @property
    def link(self) -> Link:
        raise NotImplementedError

    @property
    def alink(self) -> AsyncLink:
        raise NotImplementedError

    def fair_key(self, queue: str, key: str) -> FairKey:
        """``key``'s weight (1 unless set) and its jobs waiting on ``queue`` to start,
        staged and admitted, every priority (a partitioned queue: summed over its
        partitions). A key without waiting jobs reads as 0 waiting.

        Raises:
            ConfigError: a malformed queue name.
        """
        return run(self.link, self._fair_key_steps(queue, key), errors=False)

    async def afair_key(self, queue: str, key: str) -> FairKey:
        """:meth:`fair_key` for asyncio code."""
        return await arun(self.alink, self._fair_key_steps(queue, key), errors=False)

    def _fair_key_steps(self, queue: str, key: str) -> Steps[FairKey]:
        from taskq.broker.fairreads import fair_key_steps

        check_queue_name(queue)
        return fair_key_steps(expand(self.settings.partitions, [queue])[0], key)
