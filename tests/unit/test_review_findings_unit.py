"""Regression tests (pure functions) for failures an adversarial review reproduced."""

from __future__ import annotations

import random

import msgpack
import pytest

from taskq.errors import DecodeError
from taskq.message import Message
from taskq.retry import RetryPolicy


@pytest.mark.parametrize("attempt", [100, 512, 513, 600, 1025, 10**6, 2**63])
def test_backoff_of_a_huge_attempt_is_the_cap(attempt: int) -> None:
    """Finding 4: ``backoff_factor ** (attempt - 1)`` overflowed (OverflowError) from 513 on."""
    # Given: the default policy shape (1 s, factor 4, capped at 600 s), without jitter.
    policy = RetryPolicy(backoff_ms=1_000, backoff_factor=4.0, backoff_max_ms=600_000, jitter=False)
    # When / Then: the delay after any huge attempt is exactly the cap.
    assert policy.delay_ms(attempt) == 600_000


@pytest.mark.parametrize("attempt", [513, 10**6])
def test_backoff_of_a_huge_attempt_with_jitter_stays_around_the_cap(attempt: int) -> None:
    """Finding 4: with jitter, a huge attempt gets the cap +/-25%, like any capped attempt."""
    policy = RetryPolicy(backoff_ms=1_000, backoff_factor=4.0, backoff_max_ms=600_000)
    rng = random.Random(attempt)
    delays = [policy.delay_ms(attempt, rng=rng) for _ in range(200)]
    assert all(450_000 <= d <= 750_000 for d in delays)


@pytest.mark.parametrize("retries", [-1, -7, -(2**63)])
def test_body_with_negative_retries_is_malformed(retries: int) -> None:
    """Finding 7: a negative ``retries`` was accepted and bought the job extra attempts."""
    # Given: a body that is well formed except for a negative attempt count.
    body = msgpack.packb({"v": 1, "id": "j", "task": "t", "args": [], "retries": retries})
    # When / Then: decoding refuses it, naming the field.
    with pytest.raises(DecodeError, match="retries"):
        Message.decode(body)


def test_zero_and_positive_retries_still_decode() -> None:
    body = msgpack.packb({"v": 1, "id": "j", "task": "t", "retries": 0})
    assert Message.decode(body).retries == 0
    body = msgpack.packb({"v": 1, "id": "j", "task": "t", "retries": 5})
    assert Message.decode(body).retries == 5
