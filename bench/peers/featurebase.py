"""The interfaces of the feature benchmarks (bench/features.py): one per family.

A peer module exposes one object per family it takes part in: ``RESULTS``
(:class:`Results`), ``CHORDS`` (:class:`Chords`), ``ASYNC`` (:class:`Async`).
Its tasks are the same for every system:

* ``add(a, b)`` returns ``a + b`` (results, chord headers);
* ``tsum(values)`` returns ``sum(values)`` (chord body);
* ``nap(i)`` awaits ``asyncio.sleep(NAP_S)``, then writes job ``i``'s completion
  record (:func:`bench.common.record.record`, no Redis round trip).

A taskq module also defines ``problem(family) -> str | None``: why the family cannot
run yet (the taskq feature it needs does not exist), or None.
"""

from __future__ import annotations

import sys
from abc import ABC, abstractmethod
from collections.abc import Sequence
from pathlib import Path
from typing import Any

NAP_S = 0.05
"""What each async job awaits (``asyncio.sleep``)."""


def taskq_cli() -> list[str]:
    """The ``taskq`` console script of the running venv, else ``python -m taskq``."""
    script = Path(sys.executable).parent / "taskq"
    return [str(script)] if script.exists() else [sys.executable, "-m", "taskq"]


def tsum_expected(n: int) -> int:
    """The chord body's result for headers ``add(i, i)``, ``i < n``."""
    return n * (n - 1)


class Feature(ABC):
    """A system as the feature benchmarks see it: worker command(s) plus a producer."""

    name: str
    #: distributions whose versions are reported
    packages: Sequence[str] = ()

    def setup(self) -> None:  # noqa: B027 - optional hook
        """Prepare the producer side (called once, on an empty Redis)."""

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release the producer side (called once, at the end of the round)."""

    @abstractmethod
    def worker_argvs(self, procs: int, concurrency: int = 0) -> list[list[str]]:
        """Commands that together start ``procs`` worker processes (usually one command).

        ``concurrency``: async jobs in flight per process (async family only).
        """


class Results(Feature):
    """Enqueue one ``add(1, 2)`` and wait for its result."""

    #: glob of the Redis keys that hold results (memory per stored result)
    result_keys: str = "*"

    @abstractmethod
    def submit(self) -> Any:
        """Enqueue ``add(1, 2)`` with the system's single-call API; a handle."""

    @abstractmethod
    def wait(self, handle: Any, timeout_s: float) -> Any:
        """The handle's result, waiting at most ``timeout_s`` with the system's own API."""


class Chords(Feature):
    """A chord of ``n`` headers ``add(i, i)`` and the body ``tsum``."""

    @abstractmethod
    def submit_chord(self, n: int) -> Any:
        """Submit the chord; a handle on the body's result."""

    @abstractmethod
    def wait_chord(self, handle: Any, timeout_s: float) -> Any:
        """The body's result (the sum), waiting at most ``timeout_s``."""

    def submit_plain(self, n: int) -> Any:
        """Submit ``n`` plain ``add(i, i)`` jobs with results on; handles (reference drain)."""
        raise NotImplementedError

    def wait_plain(self, handles: Any, timeout_s: float) -> None:
        """Return once every result is stored, as the system can tell (the timed part)."""
        raise NotImplementedError

    def plain_results(self, handles: Any, timeout_s: float) -> list[Any]:
        """Every job's result (untimed check)."""
        raise NotImplementedError


class Async(Feature):
    """``nap(i)`` jobs: an ``await asyncio.sleep(NAP_S)`` each."""

    async def astart(self) -> None:
        """Connect the async producer (inside the running event loop)."""

    async def aclose(self) -> None:
        """Close the async producer (inside the running event loop)."""

    @abstractmethod
    async def enqueue(self, i: int) -> None:
        """Enqueue ``nap(i)`` with one await of the system's async API."""
