"""The keyword arguments of ``App(...)`` (:class:`SettingsArgs`) and ``@app.task(...)``
(:class:`TaskOptionArgs`) as typed dicts, for type checkers and editors.

Nothing reads them at run time, so ``taskq.config`` and ``taskq.options`` load this module on
first use of their names (a worker never does): typing checks every field's annotation of a
typed dict when it is defined, about 5M instructions for these two at each start.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, TypedDict


class SettingsArgs(TypedDict, total=False):
    """Settings as keyword arguments of :class:`~taskq.App` (each as typed as its field;
    ``redis_url`` and ``queue`` are the App's first two arguments)."""

    max_payload_bytes: int
    max_retries: int
    retry_backoff_ms: int
    retry_backoff_factor: float
    retry_backoff_max_ms: int
    retry_jitter: bool
    visibility_timeout_ms: int
    sweep_interval_ms: int
    heartbeat_interval_ms: int
    worker_ttl_ms: int
    block_ms: int
    eager: bool
    store_results: bool
    result_ttl_s: int
    max_result_bytes: int
    signing_keys: Sequence[str]
    durable_enqueue: bool
    durable_enqueue_timeout_ms: int
    partitions: Mapping[str, int]
    fair_queues: Sequence[str]
    target_time_to_start_s: float
    scale_horizon_s: float
    autoscale_idle_s: float
    validate: bool
    checkpoint_every_items: int
    checkpoint_every_ms: int
    output_max_chunks: int
    output_max_chunk_bytes: int
    log_max_bytes: int
    telemetry_ttl_s: int
    audit_max_entries: int


class TaskOptionArgs(TypedDict, total=False):
    """The keyword options of ``@app.task(...)`` (all optional; units in the names).

    ``time_limit``, ``soft_time_limit`` (s), ``retry_backoff`` and ``retry_backoff_max`` (ms)
    are the old spellings, still accepted with a DeprecationWarning.
    """

    name: str
    queue: str
    priority: str
    max_retries: int
    max_snoozes: int
    time_limit_s: float
    soft_time_limit_s: float
    retry_backoff_ms: int
    retry_backoff_max_ms: int
    retry_jitter: bool
    dont_autoretry_for: Iterable[type[BaseException]]
    store_result: bool
    result_ttl_s: int
    unique: bool
    unique_for_s: float
    unique_mode: str
    rate_limit: str
    concurrency_limit: int
    limit_key: Callable[..., Any]
    fair_key: Callable[..., str]
    validate: bool
    max_run_s: float
    debounce_key: Callable[..., str]
    debounce_s: float
    debounce_max_wait_s: float
    batch_size: int
    batch_wait_s: float
    batch_key: Callable[..., str]
    time_limit: float
    soft_time_limit: float
    retry_backoff: int
    retry_backoff_max: int
