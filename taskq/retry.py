"""Retry policy as pure functions: how long to wait, and whether to try again at all.

The worker and eager mode both take a task's policy from :func:`policy_for`.
"""

from __future__ import annotations

import math
import random
from typing import TYPE_CHECKING, NamedTuple

if TYPE_CHECKING:
    from taskq.config import Settings
    from taskq.options import TaskOptions


def capped_exponential(first: float, factor: float, cap: float, n: int) -> float:
    """``first * factor**n``, capped at ``cap``, for any ``n`` (no overflow: a job may be at
    attempt 10,000 with "retry for ever, capped")."""
    if n <= 0 or factor <= 1.0 or first <= 0:
        return min(cap, first)
    if first >= cap:
        return cap
    steps_to_cap = math.log(cap / first) / math.log(factor)
    return cap if n >= steps_to_cap else min(cap, first * factor**n)


class RetryPolicy(NamedTuple):
    """When a failed job runs again.

    ``max_retries`` counts retries after the first run, as in Celery: ``max_retries=2`` means
    a job runs at most three times, and its third failure dead-letters it. A named tuple, not
    a frozen dataclass: a worker defines it at its start, where a frozen dataclass costs about
    4M instructions to define.
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
        base = capped_exponential(
            self.backoff_ms, self.backoff_factor, self.backoff_max_ms, attempt - 1
        )
        if self.jitter:
            base *= (rng or random).uniform(0.75, 1.25)
        return max(0, int(base))


def policy_for(options: TaskOptions, settings: Settings) -> RetryPolicy:
    """A task's retry settings, falling back to the app's."""
    o = options
    return RetryPolicy(
        max_retries=settings.max_retries if o.max_retries is None else o.max_retries,
        backoff_ms=o.retry_backoff_ms or settings.retry_backoff_ms,
        backoff_factor=settings.retry_backoff_factor,
        backoff_max_ms=o.retry_backoff_max_ms or settings.retry_backoff_max_ms,
        jitter=settings.retry_jitter if o.retry_jitter is None else o.retry_jitter,
    )
