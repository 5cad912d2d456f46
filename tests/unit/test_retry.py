"""Retry policy: Celery's max_retries meaning, exponential backoff, cap and jitter bounds."""

from __future__ import annotations

import random

import pytest

from taskq.retry import RetryPolicy


@pytest.mark.parametrize("attempt", [100, 512, 513, 600, 1025, 10**6, 2**63])
def test_backoff_of_a_huge_attempt_is_the_cap(attempt: int) -> None:
    """``backoff_factor ** (attempt - 1)`` overflowed (OverflowError) from 513 on."""
    # Given: the default policy shape (1 s, factor 4, capped at 600 s), without jitter.
    policy = RetryPolicy(backoff_ms=1_000, backoff_factor=4.0, backoff_max_ms=600_000, jitter=False)
    # When / Then: the delay after any huge attempt is exactly the cap.
    assert policy.delay_ms(attempt) == 600_000


@pytest.mark.parametrize("attempt", [513, 10**6])
def test_backoff_of_a_huge_attempt_with_jitter_stays_around_the_cap(attempt: int) -> None:
    """With jitter, a huge attempt gets the cap +/-25%, like any capped attempt."""
    policy = RetryPolicy(backoff_ms=1_000, backoff_factor=4.0, backoff_max_ms=600_000)
    rng = random.Random(attempt)
    delays = [policy.delay_ms(attempt, rng=rng) for _ in range(200)]
    assert all(450_000 <= d <= 750_000 for d in delays)


def test_max_retries_counts_retries_after_the_first_run() -> None:
    policy = RetryPolicy(max_retries=2)
    assert policy.max_attempts == 3
    assert [policy.should_retry(a) for a in (1, 2, 3)] == [True, True, False]


def test_zero_retries_means_one_run() -> None:
    assert not RetryPolicy(max_retries=0).should_retry(1)


def test_backoff_table_without_jitter() -> None:
    policy = RetryPolicy(backoff_ms=1000, backoff_factor=4, backoff_max_ms=60_000, jitter=False)
    assert [policy.delay_ms(a) for a in (1, 2, 3, 4, 5)] == [1000, 4000, 16000, 60000, 60000]


@pytest.mark.parametrize("attempt", [1, 2, 3])
def test_jitter_stays_within_25_percent(attempt: int) -> None:
    policy = RetryPolicy(backoff_ms=1000, backoff_factor=4)
    base = 1000 * 4 ** (attempt - 1)
    rng = random.Random(attempt)
    delays = [policy.delay_ms(attempt, rng=rng) for _ in range(500)]
    assert min(delays) >= base * 0.75
    assert max(delays) <= base * 1.25
    assert len(set(delays)) > 100  # it does vary
