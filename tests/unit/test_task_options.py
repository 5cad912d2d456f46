"""apply_async argument checks and what the returned Job says."""

from __future__ import annotations

import time
from datetime import datetime, timedelta, timezone

import pytest

from taskq.errors import ConfigError
from taskq.task import eta_to_ms


def test_naive_eta_is_utc() -> None:
    naive = datetime.now(timezone.utc).replace(tzinfo=None) + timedelta(seconds=60)
    due = eta_to_ms(None, naive)
    assert due is not None and abs(due - (time.time() + 60) * 1000) < 2000


def test_aware_eta_and_timestamp() -> None:
    later = datetime.now(timezone(timedelta(hours=-5))) + timedelta(seconds=30)
    due = eta_to_ms(None, later)
    assert due is not None and abs(due - (time.time() + 30) * 1000) < 2000
    assert eta_to_ms(None, time.time() + 10) is not None
    assert eta_to_ms(None, time.time() - 10) is None
    assert eta_to_ms(-5, None) is None


@pytest.mark.parametrize(
    ("countdown", "eta"),
    [
        (float("inf"), None),
        (float("nan"), None),
        ("10", None),
        (None, "2030-01-01"),
        (None, float("nan")),
        (1, time.time() + 5),
    ],
)
def test_bad_countdown_or_eta_is_refused(countdown: object, eta: object) -> None:
    with pytest.raises(ConfigError):
        eta_to_ms(countdown, eta)  # type: ignore[arg-type]
