"""The interface every benchmarked system implements."""

from __future__ import annotations

import os
import sys
from abc import ABC, abstractmethod
from collections.abc import Sequence
from pathlib import Path

Item = tuple[int, int]
"""One job's arguments: (job index, enqueue time in ns)."""


def redis_url() -> str:
    """URL of the bench's private Redis (set by the harness)."""
    url = os.environ.get("BENCH_REDIS_URL")
    if not url:
        raise RuntimeError("BENCH_REDIS_URL is not set; run through bench/run.py")
    return url


def cli(name: str) -> str:
    """Path of console script ``name`` in the running interpreter's venv."""
    return str(Path(sys.executable).parent / name)


class System(ABC):
    """A task queue as seen by the bench: a worker CLI plus a producer."""

    name: str
    #: distributions whose versions are reported
    packages: Sequence[str] = ()

    def setup(self) -> None:  # noqa: B027 - optional hook
        """Prepare the producer side (called once, on an empty Redis)."""

    @abstractmethod
    def worker_argv(self, procs: int, extra: Sequence[str] = ()) -> list[str]:
        """Command line starting the idiomatic worker with ``procs`` processes."""

    @abstractmethod
    def enqueue_one(self, i: int, t_ns: int) -> None:
        """Enqueue one benchmark job with a single-call API."""

    @abstractmethod
    def enqueue_bulk(self, items: Sequence[Item]) -> None:
        """Enqueue a batch of benchmark jobs with the system's bulk API."""
