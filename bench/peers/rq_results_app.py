"""RQ with a worker pool of SimpleWorkers (results family).

RQ 2.x/3.x store each job's result in a per-job stream (``rq:results:<id>``, beside the
job's hash ``rq:job:<id>``, both kept ``result_ttl`` = 500 s by default);
``Job.latest_result(timeout=...)`` waits for it with ``XREAD BLOCK`` (whole seconds).
"""

from __future__ import annotations

import math
from typing import Any

from redis import Redis
from rq import Queue
from rq.job import Job

from bench.peers.base import cli, redis_url
from bench.peers.featurebase import Results


def add(a: int, b: int) -> int:
    """Results task."""
    return a + b


class RQResults(Results):
    """``queue.enqueue(add, 1, 2)``, then ``job.latest_result(timeout=...)``."""

    name = "rq"
    packages = ("rq", "redis")
    result_keys = "rq:results:*"

    def setup(self) -> None:
        self.queue = Queue("default", connection=Redis.from_url(redis_url()))

    def worker_argvs(self, procs: int, concurrency: int = 0) -> list[list[str]]:
        return [[
            cli("rq"), "worker-pool", "-n", str(procs), "-u", redis_url(),
            "-w", "rq.worker.SimpleWorker", "-l", "WARNING", "default",
        ]]  # fmt: skip

    def submit(self) -> Job:
        return self.queue.enqueue(add, 1, 2)

    def wait(self, handle: Any, timeout_s: float) -> Any:
        result = handle.latest_result(timeout=max(1, math.ceil(timeout_s)))
        if result is None:
            raise TimeoutError(f"no result after {timeout_s:g}s")
        return result.return_value


RESULTS = RQResults()
