"""The fleet's worker registry in Redis: each worker's heartbeat record, and the visibility
timeout all live workers of a queue share (written by masters, read by ``taskq inspect``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from taskq.broker.link import Link
from taskq.broker.resp import Command
from taskq.broker.slots import slot_runs
from taskq.keys import QueueKeys


class WorkerRegistry:
    """The registry entries of one worker, on the queues it serves."""

    def __init__(self, link: Link, queues: Sequence[str]) -> None:
        self.link = link
        self.queues = tuple(queues)
        self.keys = {q: QueueKeys(q) for q in self.queues}

    def heartbeat(
        self, worker_id: str, fields: dict[str, Any], *, ttl_ms: int, visibility_timeout_ms: int
    ) -> tuple[str, int] | None:
        """Write a worker's registry record (``heartbeat_ms`` is the Redis clock's); it
        expires unless refreshed within ``ttl_ms``.

        Also claims ``visibility_timeout_ms`` as the setting of each queue, which every live
        worker of a queue must share. Returns the first queue whose live workers use another
        value, with that value, or None.
        """
        flat = [x for kv in fields.items() for x in kv]
        args = [worker_id, ttl_ms, visibility_timeout_ms, *flat]
        found = None
        for run in slot_runs(self.link, self.queues):  # one script per hash slot
            keys = [
                key
                for k in (self.keys[q] for q in run)
                for key in (k.worker(worker_id), k.workers, k.visibility)
            ]
            conflict = self.link.script("heartbeat", keys, args)
            if conflict and found is None:
                found = run[int(conflict[0]) - 1], int(conflict[1])
        return found

    def unregister(self, worker_id: str) -> None:
        for run in slot_runs(self.link, self.queues):
            commands: list[Command] = []
            for k in (self.keys[q] for q in run):
                commands += [("DEL", k.worker(worker_id)), ("ZREM", k.workers, worker_id)]
            self.link.pipeline(commands, transaction=True)
