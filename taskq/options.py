"""Task options: what ``@app.task(...)`` accepts and the checked value a Task carries.

Values only: nothing here knows an app or a task, so every module that reads a task's
options (the retry policy, uniqueness, the limits, the worker) can sit below them.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from taskq.config import MAX_RESULT_TTL_S, check_queue_name, kwargs_loaded_late
from taskq.errors import ConfigError
from taskq.keys import check_priority
from taskq.limits import Rate

if TYPE_CHECKING:
    from taskq.kwargs import TaskOptionArgs as TaskOptionArgs
else:
    __getattr__ = kwargs_loaded_late(__name__, "TaskOptionArgs")


DEPRECATED_OPTIONS = {
    "time_limit": "time_limit_s",
    "soft_time_limit": "soft_time_limit_s",
    "retry_backoff": "retry_backoff_ms",
    "retry_backoff_max": "retry_backoff_max_ms",
}
"""Old option names (units not in the name) → the names that say their unit."""


@dataclass(frozen=True)
class TaskOptions:
    """Per-task settings; None means "use the app's setting"."""

    queue: str | None = None
    priority: str = "normal"
    max_retries: int | None = None
    max_snoozes: int | None = None
    """How often a job may snooze (``taskq.Snooze``); None: without limit."""
    time_limit_s: float | None = None
    soft_time_limit_s: float | None = None
    retry_backoff_ms: int | None = None
    retry_backoff_max_ms: int | None = None
    retry_jitter: bool | None = None
    dont_autoretry_for: tuple[type[BaseException], ...] = ()
    bind: bool = False
    store_result: bool | None = None
    result_ttl_s: int | None = None
    unique: bool = False
    """Each job is unique by its task and arguments (see :mod:`taskq.unique`)."""
    unique_for_s: float = 3600.0
    unique_mode: str = "until_done"
    rate_limit: str | None = None
    """At most this many starts per window across the fleet (:mod:`taskq.limits`)."""
    concurrency_limit: int | None = None
    """At most this many of the task's jobs run at once across the fleet."""
    limit_key: Callable[..., Any] | None = None
    """Called with the job's arguments: one limit (rate, concurrency) per value it returns."""
    fair_key: Callable[..., str] | None = None
    """Called with the job's arguments: its fairness key on a fair queue (docs/fairness.md)."""
    validate: bool | None = None
    """Check argument values against the annotations at enqueue (None: the app's setting)."""
    max_run_s: float | None = None
    """An iterating job (``taskq.iterate``) that ran this long saves its cursor and goes to
    the back of its queue, without spending an attempt (docs/resumable.md)."""
    debounce_key: Callable[..., str] | None = None
    """Called with the job's arguments: the ``debounce_key`` of a call that names none
    (:mod:`taskq.debounce`); ``debounce_s`` and ``debounce_max_wait_s`` are the defaults."""
    debounce_s: float | None = None
    debounce_max_wait_s: float | None = None
    batch_size: int | None = None
    """Calls of the task accumulate per ``batch_key`` and run as one job (its one argument:
    the list of calls) when this many are there, or ``batch_wait_s`` after the first
    (:mod:`taskq.batching`)."""
    batch_wait_s: float | None = None
    batch_key: Callable[..., str] | None = None

    def __post_init__(self) -> None:
        check_priority(self.priority)
        if self.queue is not None:
            check_queue_name(self.queue)
        self._check_counts()
        for name in ("time_limit_s", "soft_time_limit_s", "max_run_s"):
            check_seconds(name, getattr(self, name))
        if self.rate_limit is not None:
            Rate.parse(self.rate_limit)
        c = self.concurrency_limit
        if c is not None and (isinstance(c, bool) or not isinstance(c, int) or c < 1):
            raise ConfigError(f"concurrency_limit must be a whole number >= 1, not {c!r}")
        if self.limit_key is not None and self.rate_limit is None and c is None:
            raise ConfigError("limit_key needs a rate_limit or a concurrency_limit")
        self._check_flow_control()
        if self.unique_mode not in ("until_done", "throttle", "keep_last"):
            raise ConfigError(
                f"unique_mode must be until_done, throttle or keep_last, not {self.unique_mode!r}"
            )
        if isinstance(self.unique_for_s, bool) or not (
            isinstance(self.unique_for_s, int | float) and self.unique_for_s > 0
        ):
            raise ConfigError(f"unique_for_s must be seconds > 0, not {self.unique_for_s!r}")
        if self.result_ttl_s is not None and (
            isinstance(self.result_ttl_s, bool)
            or not isinstance(self.result_ttl_s, int)
            or not 0 < self.result_ttl_s <= MAX_RESULT_TTL_S
        ):
            raise ConfigError(
                f"result_ttl_s must be a whole number of seconds > 0 and at most "
                f"{MAX_RESULT_TTL_S} (ten years), not {self.result_ttl_s!r}"
            )

    def _check_counts(self) -> None:
        if self.max_retries is not None and self.max_retries < 0:
            raise ConfigError("max_retries must be >= 0")
        n = self.max_snoozes
        if n is not None and (isinstance(n, bool) or not isinstance(n, int) or n < 0):
            raise ConfigError(f"max_snoozes must be a whole number >= 0, not {n!r}")

    def _check_flow_control(self) -> None:
        """The debounce options (:mod:`taskq.debounce`).

        Raises:
            ConfigError: a key that is not a function, or a bad or missing time.
        """
        if self.fair_key is not None and not callable(self.fair_key):
            raise ConfigError("fair_key must be a function of the job's arguments")
        if self.debounce_key is not None and not callable(self.debounce_key):
            raise ConfigError("debounce_key must be a function of the job's arguments")
        if self.debounce_key is not None and self.debounce_s is None:
            raise ConfigError("debounce_key needs debounce_s")
        if self.debounce_s is not None or self.debounce_max_wait_s is not None:
            check_debounce_times(self.debounce_s, self.debounce_max_wait_s)
        self._check_batching()

    def _check_batching(self) -> None:
        """The batching options (:mod:`taskq.batching`).

        Raises:
            ConfigError: a bad size, wait or key function, one without the others, or
                batching with debounce or uniqueness by arguments.
        """
        n, wait, key = self.batch_size, self.batch_wait_s, self.batch_key
        if n is None and wait is None and key is None:
            return
        if n is None or wait is None:
            raise ConfigError("batching needs batch_size and batch_wait_s")
        if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= MAX_BATCH_SIZE:
            raise ConfigError(f"batch_size must be a whole number 1 to {MAX_BATCH_SIZE}, not {n!r}")
        check_seconds("batch_wait_s", wait)
        if key is not None and not callable(key):
            raise ConfigError("batch_key must be a function of the job's arguments")
        if self.debounce_key is not None or self.unique:
            raise ConfigError("a batching task cannot also be debounced or unique")


MAX_TIME_LIMIT_S = 366 * 86_400.0
"""The longest time limit (a year): a limit is kept in ms on monotonic clocks and in records."""


def check_seconds(name: str, value: float | None) -> None:
    """A time limit: None (the app's), else a finite number of seconds > 0, at most a year.

    Raises:
        ConfigError: 0, a negative number, NaN, infinity, or anything but a number.
    """
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigError(f"{name} must be a number of seconds, not {value!r}")
    if not 0 < value <= MAX_TIME_LIMIT_S:  # False for NaN too
        raise ConfigError(f"{name} must be > 0 and at most {MAX_TIME_LIMIT_S:.0f}, not {value!r}")


MAX_BATCH_SIZE = 10_000
"""The most calls one batch job holds."""
DEBOUNCE_MAX_WAIT_FACTOR = 10
"""``debounce_max_wait_s`` when neither the call nor the task says: ten debounce periods."""


def check_debounce_times(debounce_s: float | None, max_wait_s: float | None) -> tuple[float, float]:
    """The checked (debounce, max wait) in seconds (:mod:`taskq.debounce`); max wait
    defaults to :data:`DEBOUNCE_MAX_WAIT_FACTOR` debounces, at most a year.

    Raises:
        ConfigError: a time that is not seconds > 0 (at most a year), or a max wait below
            the debounce.
    """
    if debounce_s is None:
        raise ConfigError("debounce_max_wait_s needs debounce_s")
    check_seconds("debounce_s", debounce_s)
    debounce = float(debounce_s)
    if max_wait_s is None:
        return debounce, min(MAX_TIME_LIMIT_S, debounce * DEBOUNCE_MAX_WAIT_FACTOR)
    check_seconds("debounce_max_wait_s", max_wait_s)
    max_wait = float(max_wait_s)
    if max_wait < debounce:
        raise ConfigError(
            f"debounce_max_wait_s ({max_wait!r}) must be at least debounce_s ({debounce!r})"
        )
    return debounce, max_wait


def renamed_options(options: Mapping[str, Any]) -> dict[str, Any]:
    """The options with old spellings renamed (a DeprecationWarning at the decorator)."""
    opts: dict[str, Any] = dict(options)
    for old, new in DEPRECATED_OPTIONS.items():
        if old in opts:
            warnings.warn(
                f"task option {old!r} is deprecated: use {new!r}", DeprecationWarning, stacklevel=4
            )
            opts[new] = opts.pop(old)
    return opts


def build_options(options: Mapping[str, Any], default_name: str) -> tuple[str, TaskOptions]:
    """The task's name (``name=``, else ``default_name``: from the function) and options.

    Raises:
        ConfigError: an unknown option, or an invalid value; the message names the task.
    """
    opts: dict[str, Any] = dict(options)
    name = opts.pop("name", None) or default_name
    if "dont_autoretry_for" in opts:
        opts["dont_autoretry_for"] = tuple(opts["dont_autoretry_for"])
    try:
        return name, TaskOptions(**opts)
    except TypeError as exc:
        raise ConfigError(f"task {name!r}: unknown task option: {exc}") from None
    except ConfigError as exc:
        raise ConfigError(f"task {name!r}: {exc}") from None
