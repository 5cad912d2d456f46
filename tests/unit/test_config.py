"""Settings: environment parsing, URL precedence, validation."""

from __future__ import annotations

import pytest

from taskq.config import DEFAULT_REDIS_URL, Settings, redis_url_from_env
from taskq.errors import ConfigError


def test_url_precedence() -> None:
    assert redis_url_from_env({}) == DEFAULT_REDIS_URL
    assert redis_url_from_env({"REDIS_URL": "redis://a"}) == "redis://a"
    env = {"REDIS_URL": "redis://a", "TASKQ_REDIS_URL": "rediss://u:p@b:6380/1"}
    assert redis_url_from_env(env) == "rediss://u:p@b:6380/1"


def test_from_env_parses_types_and_overrides_win() -> None:
    env = {"TASKQ_MAX_RETRIES": "5", "TASKQ_EAGER": "true", "TASKQ_QUEUE": "emails"}
    s = Settings.from_env(env, queue="other")
    assert (s.max_retries, s.eager, s.queue) == (5, True, "other")


def test_bad_environment_value_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="TASKQ_MAX_RETRIES='lots'"):
        Settings.from_env({"TASKQ_MAX_RETRIES": "lots"})


def test_unknown_setting_is_refused() -> None:
    with pytest.raises(ConfigError, match="unknown setting"):
        Settings.build(max_retrys=3)


@pytest.mark.parametrize("queue", ["", "a:b", "has space"])
def test_invalid_queue_names(queue: str) -> None:
    with pytest.raises(ConfigError):
        Settings(queue=queue)


def test_sweep_must_be_faster_than_the_visibility_timeout() -> None:
    with pytest.raises(ConfigError, match="sweep_interval_ms"):
        Settings(visibility_timeout_ms=1000, sweep_interval_ms=1000)
