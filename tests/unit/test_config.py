"""Settings: environment parsing, URL precedence, validation."""

from __future__ import annotations

import dataclasses

import pytest

from taskq import App
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


@pytest.mark.parametrize(
    "bad",
    [{"target_time_to_start_s": 0}, {"autoscale_idle_s": -1.0}, {"scale_horizon_s": -0.5}],
)
def test_scaling_settings_are_checked(bad: dict[str, float]) -> None:
    with pytest.raises(ConfigError, match=next(iter(bad))):
        Settings(**bad)  # type: ignore[arg-type]


WRONG_TYPES = {
    "redis_url": 6379,
    "queue": ["tasks"],
    "max_payload_bytes": 1.5,
    "max_retries": "3",
    "retry_backoff_ms": None,
    "retry_backoff_factor": "4",
    "retry_backoff_max_ms": 600.5,
    "retry_jitter": 1,
    "visibility_timeout_ms": True,
    "sweep_interval_ms": "500",
    "heartbeat_interval_ms": 2e3,
    "worker_ttl_ms": [10_000],
    "block_ms": b"1000",
    "eager": "yes",
    "store_results": 0,
    "result_ttl_s": 86_400.0,
    "max_result_bytes": "1MB",
    "signing_keys": "k1",
    "durable_enqueue": None,
    "validate": "yes",
    "durable_enqueue_timeout_ms": 1.0,
    "partitions": 3,
    "fair_queues": "tasks",
    "target_time_to_start_s": "10",
    "scale_horizon_s": None,
    "autoscale_idle_s": [60],
    "checkpoint_every_items": "100",
    "checkpoint_every_ms": 1.5,
    "output_max_chunks": "10000",
    "output_max_chunk_bytes": 1.5,
    "log_max_bytes": None,
    "telemetry_ttl_s": 3600.0,
    "audit_max_entries": "many",
}


def test_every_setting_has_a_wrong_type_case() -> None:
    assert set(WRONG_TYPES) == {f.name for f in dataclasses.fields(Settings)}


@pytest.mark.parametrize(("name", "value"), WRONG_TYPES.items())
def test_a_setting_of_the_wrong_type_is_a_config_error_naming_it(name: str, value: object) -> None:
    with pytest.raises(ConfigError, match=rf"^setting {name} must be "):
        Settings.build(**{name: value})


def test_app_with_a_wrong_typed_setting_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="setting partitions must be a mapping"):
        App(partitions=3)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "url",
    ["redis://h:6379/0?ssl_password=x", "redis+cluster://h:1,h:2?ssl_certfile=c",
     "unix:///tmp/r.sock?SSL_CA_CERTS=ca"],
)  # fmt: skip
def test_a_tls_option_without_tls_is_a_config_error(url: str) -> None:
    with pytest.raises(ConfigError, match=r"is a TLS option; use a rediss:// URL"):
        App(url)


def test_tls_options_on_a_tls_url_are_kept() -> None:
    url = "rediss://h:6379/0?ssl_password=x&ssl_ca_certs=/ca.pem"
    assert Settings(redis_url=url).redis_url == url


def test_fair_queues_come_from_the_environment_and_their_names_are_checked() -> None:
    assert Settings.from_env({"TASKQ_FAIR_QUEUES": "a, b"}).fair_queues == ("a", "b")
    with pytest.raises(ConfigError, match="invalid queue name"):
        Settings(fair_queues=["a:b"])
