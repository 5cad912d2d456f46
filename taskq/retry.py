"""Retry policy as pure functions: how long to wait, and whether to try again at all."""

from __future__ import annotations

import random
from dataclasses import dataclass


@dataclass(frozen=True)
class RetryPolicy:
    """When a failed job runs again.

    ``max_retries`` counts retries after the first run, as in Celery: ``max_retries=2`` means
    a job runs at most three times, and its third failure dead-letters it.
    """

    max_retries: int = 2
    backoff_ms: int = 1_000
    backoff_factor: float = 4.0
    backoff_max_ms: int = 600_000
    jitter: bool = True

    @property
    def max_attempts(self) -> int:
        return self.max_retries + 1

    def should_retry(self, attempt: int) -> bool:
        """True if a job whose ``attempt``-th run (1-based) just failed may run again."""
        return attempt < self.max_attempts

    def delay_ms(self, attempt: int, *, rng: random.Random | None = None) -> int:
        """Backoff after the ``attempt``-th failure: 1 s, 4 s, 16 s, ... capped, +/-25% jitter."""
        base = min(self.backoff_max_ms, self.backoff_ms * self.backoff_factor ** (attempt - 1))
        if self.jitter:
            base *= (rng or random).uniform(0.75, 1.25)
        return max(0, int(base))
