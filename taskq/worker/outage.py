"""Riding out Redis outages in a consumer: retry a broker call with capped, jittered backoff.

A worker never exits because Redis is down, restarting, out of memory or busy: it keeps what
it holds and tries again. Only :class:`~taskq.errors.BrokerUnavailable` is waited out; a
refusal (no permission, a script error) is raised, since waiting would not help.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable
from typing import TypeVar

from taskq.errors import BrokerUnavailable
from taskq.retry import capped_exponential

logger = logging.getLogger(__name__)
T = TypeVar("T")

FIRST_DELAY_S = 0.05
MAX_DELAY_S = 5.0


class OutageWaiter:
    """Runs broker calls until they succeed, noting when an outage starts and ends.

    Args:
        should_give_up: called after each failure; True stops the waiting (the caller is
            shutting down) by raising the error.
    """

    def __init__(self, should_give_up: Callable[[], bool] = lambda: False) -> None:
        self.should_give_up = should_give_up
        self.since = 0.0
        self.happened = False
        """Set at every outage; the consumer clears it once it has reconciled."""

    def call(self, fn: Callable[[], T]) -> T:
        failures = 0
        while True:
            try:
                result = fn()
            except BrokerUnavailable as exc:
                self._note(exc)
                if self.should_give_up():
                    raise
                delay = capped_exponential(FIRST_DELAY_S, 2.0, MAX_DELAY_S, failures)
                time.sleep(delay * random.uniform(0.5, 1.5))
                failures += 1
                continue
            if self.since:
                logger.warning("Redis is back after %.1fs", time.monotonic() - self.since)
                self.since = 0.0
            return result

    def _note(self, exc: BaseException) -> None:
        self.happened = True
        if not self.since:
            self.since = time.monotonic()
            logger.warning("Redis unavailable (%s); retrying with backoff", exc)
