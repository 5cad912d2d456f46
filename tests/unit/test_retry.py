"""Retry policy: Celery's max_retries meaning, exponential backoff, cap and jitter bounds."""

from __future__ import annotations

import random

import pytest

from taskq.retry import RetryPolicy


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
