"""Settings: one frozen value that says how to reach Redis and how jobs behave.

The environment is read here and in ``cli.py`` only.
"""

from __future__ import annotations

import dataclasses
import functools
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any

from taskq.errors import ConfigError
from taskq.signing import Signer, signer_for

MAX_RESULT_TTL_S = 10 * 365 * 24 * 3600
"""The longest a record and result may live: ten years (its TTL in ms stays an exact integer
in Lua; a body asking for more is refused)."""
MAX_TIME_MS = 2**47
"""Largest time (ms since the epoch) or delay a body may carry: year 6429, far inside the
integers that Lua's doubles hold exactly."""
MAX_RETRIES = 2**31 - 1
"""Largest attempt count a body may carry."""

DEFAULT_REDIS_URL = "redis://localhost:6379/0"


def redis_url_from_env(env: Mapping[str, str] | None = None) -> str:
    """``TASKQ_REDIS_URL``, else ``REDIS_URL`` (what Procfile platforms set), else localhost."""
    env = os.environ if env is None else env
    return env.get("TASKQ_REDIS_URL") or env.get("REDIS_URL") or DEFAULT_REDIS_URL


def kwargs_loaded_late(module: str, name: str) -> Callable[[str], Any]:
    """The ``__getattr__`` of ``module``, which loads its typed dict ``name`` (the App's or a
    task's keyword arguments) from :mod:`taskq.kwargs` on first use: nothing reads those at
    run time, and a worker's start need not define them."""

    def __getattr__(attribute: str) -> Any:
        if attribute == name:
            from taskq import kwargs

            return getattr(kwargs, name)
        raise AttributeError(f"module {module!r} has no attribute {attribute!r}")

    return __getattr__


if TYPE_CHECKING:
    from taskq.kwargs import SettingsArgs as SettingsArgs
else:
    __getattr__ = kwargs_loaded_late(__name__, "SettingsArgs")


@dataclass(frozen=True)
class Settings:
    """Everything an :class:`~taskq.App` needs; all times in milliseconds unless named ``_s``.

    Attributes:
        redis_url: ``redis://``, ``rediss://`` (TLS) or ``unix://``; user and password may be
            given in the URL (``redis://user:secret@host:6379/0``). ``redis+cluster://h:p,h:p``
            is a Redis Cluster (queue names then need a hash tag: ``{tasks}``) and
            ``redis+sentinel://h:p,h:p/master_name/0`` the master a set of sentinels watches
            (docs/protocol.md, "Topologies").
        queue: default queue name; its keys are ``<queue>:high``, ``<queue>:normal``, ...
        max_payload_bytes: an encoded job larger than this is refused at enqueue.
        max_retries: default retries after the first run (2: a job runs at most 3 times).
        retry_backoff_ms: delay before the first retry; each later one is
            ``retry_backoff_factor`` times longer, capped at ``retry_backoff_max_ms``, with
            +/-25% jitter if ``retry_jitter``.
        visibility_timeout_ms: an entry whose owner stopped renewing its lease for this long is
            taken back by the crash-recovery sweep.
        sweep_interval_ms: how often one worker of the fleet runs that sweep.
        heartbeat_interval_ms: how often a worker refreshes its registry record.
        worker_ttl_ms: a worker record that was not refreshed for this long disappears.
        block_ms: longest single blocking read of an idle worker.
        eager: run tasks inline at enqueue time (for application tests); nothing touches Redis.
        store_results: keep every job's status record and return value (a task's own
            ``store_result`` overrides it); off, a job writes nothing beyond the queue's keys.
        result_ttl_s: how long a job's record and result live after its last change.
        max_result_bytes: a return value larger than this when encoded fails the job.
        signing_keys: HMAC keys (``TASKQ_SIGNING_KEYS``, comma-separated). Producers sign
            every job with the first; workers then run only jobs signed with one of them.
            Empty: nothing is signed or checked. See docs/security.md.
        durable_enqueue: an enqueue returns only once ``WAIT 1`` confirmed that a replica
            has the job (on a cluster: a replica of every master written to), so a failover
            cannot lose an acknowledged enqueue; else it raises
            :class:`~taskq.errors.BrokerUnavailable` after ``durable_enqueue_timeout_ms``
            (the job is on the master, unconfirmed). Needs a replica. See docs/reliability.md.
        partitions: queues split into partitions, each its own queue with its own hash tag
            (``{"tasks": 4}``: ``{tasks.0}`` ... ``{tasks.3}``; ``TASKQ_PARTITIONS=tasks=4``), so
            that one busy queue spreads over the shards of a Redis Cluster. Producers spread
            its jobs round robin (or by ``partition_key=``), workers read every partition.
            See docs/scaling.md.
        fair_queues: queues whose workers share them fairly across the jobs' fairness keys
            (``TASKQ_FAIR_QUEUES=a,b``; docs/fairness.md). Others keep the plain layout.
        target_time_to_start_s: the autoscaling signal (``taskq scale``) asks for enough
            worker processes that a waiting job starts within this many seconds.
        scale_horizon_s: delayed jobs and retries due within this many seconds count as
            waiting for that signal.
        autoscale_idle_s: ``taskq worker --autoscale`` shrinks to its minimum once no job
            waited or ran for this many seconds.
        validate: check every task's argument values against its annotations at enqueue
            (a task's own ``validate`` overrides it): pydantic when installed, else a small
            built-in check. See docs/tasks.md, "Argument types".
        checkpoint_every_items / checkpoint_every_ms: a ``taskq.iterate`` walk saves its
            cursor after this many items or this long, whichever comes first
            (docs/resumable.md).
        output_max_chunks: a job's output stream keeps its last this many chunks (older
            ones are trimmed; ``XADD MAXLEN ~``, so a few more may stay).
        output_max_chunk_bytes: ``emit`` refuses a chunk larger than this when encoded.
        log_max_bytes: a job keeps its newest log records up to this many bytes; older ones
            are dropped and counted.
        telemetry_ttl_s: a running job's progress, output and logs expire this long after
            their last write; once it ends, ``result_ttl_s`` after it. See docs/telemetry.md.
        audit_max_entries: the control plane's audit stream of each queue (pauses,
            resumes, limit changes, cancels) keeps about this many entries, the newest.
    """

    redis_url: str = DEFAULT_REDIS_URL
    queue: str = "tasks"
    max_payload_bytes: int = 512 * 1024
    max_retries: int = 2
    retry_backoff_ms: int = 1_000
    retry_backoff_factor: float = 4.0
    retry_backoff_max_ms: int = 600_000
    retry_jitter: bool = True
    visibility_timeout_ms: int = 30_000
    sweep_interval_ms: int = 5_000
    heartbeat_interval_ms: int = 2_000
    worker_ttl_ms: int = 10_000
    block_ms: int = 1_000
    eager: bool = False
    store_results: bool = False
    result_ttl_s: int = 86_400
    max_result_bytes: int = 512 * 1024
    signing_keys: tuple[str, ...] = ()
    durable_enqueue: bool = False
    durable_enqueue_timeout_ms: int = 1_000
    partitions: Mapping[str, int] = dataclasses.field(default_factory=dict)
    fair_queues: tuple[str, ...] = ()
    target_time_to_start_s: float = 10.0
    scale_horizon_s: float = 60.0
    autoscale_idle_s: float = 60.0
    validate: bool = False
    checkpoint_every_items: int = 100
    checkpoint_every_ms: int = 1_000
    output_max_chunks: int = 10_000
    output_max_chunk_bytes: int = 1024 * 1024
    log_max_bytes: int = 64 * 1024
    telemetry_ttl_s: int = 86_400
    audit_max_entries: int = 10_000

    def __repr__(self) -> str:
        # Neither the password in the URL nor the signing keys are shown.
        shown = {f.name: getattr(self, f.name) for f in fields(self)}
        shown["redis_url"] = redact(self.redis_url)
        shown["signing_keys"] = f"<{len(self.signing_keys)} key(s)>"
        return "Settings(" + ", ".join(f"{k}={v!r}" for k, v in shown.items()) + ")"

    def __post_init__(self) -> None:
        for field in fields(self):
            _check_type(field.name, field.type, getattr(self, field.name))
        check_url_options(self.redis_url)
        check_queue_name(self.queue)
        object.__setattr__(self, "signing_keys", tuple(self.signing_keys))
        if self.max_retries < 0:
            raise ConfigError("max_retries must be >= 0")
        if self.sweep_interval_ms >= self.visibility_timeout_ms:
            raise ConfigError("sweep_interval_ms must be below visibility_timeout_ms")
        for name in (
            "max_payload_bytes",
            "retry_backoff_ms",
            "visibility_timeout_ms",
            "block_ms",
            "result_ttl_s",
            "max_result_bytes",
            "durable_enqueue_timeout_ms",
            "checkpoint_every_items",
            "checkpoint_every_ms",
            "output_max_chunks",
            "output_max_chunk_bytes",
            "log_max_bytes",
            "telemetry_ttl_s",
            "audit_max_entries",
        ):
            if getattr(self, name) <= 0:
                raise ConfigError(f"{name} must be > 0")
        _check_scaling(self)
        if self.result_ttl_s > MAX_RESULT_TTL_S:
            raise ConfigError(f"result_ttl_s must be at most {MAX_RESULT_TTL_S} (ten years)")
        if not self.retry_backoff_factor >= 1.0:
            raise ConfigError("retry_backoff_factor must be >= 1")
        if self.retry_backoff_max_ms < self.retry_backoff_ms:
            raise ConfigError("retry_backoff_max_ms must be >= retry_backoff_ms")
        if self.signing_keys:
            Signer(self.signing_keys)  # each key non-empty, none twice
        object.__setattr__(self, "partitions", _checked_partitions(self.partitions))
        object.__setattr__(self, "fair_queues", _checked_names(self.fair_queues))

    @property
    def signer(self) -> Signer | None:
        """What signs and checks job bodies (None: signing is off)."""
        return signer_for(self.signing_keys)

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, **overrides: Any) -> Settings:
        """Settings from ``TASKQ_*`` variables (``TASKQ_MAX_RETRIES=5``), then ``overrides``."""
        env = os.environ if env is None else env
        values: dict[str, Any] = {"redis_url": redis_url_from_env(env)}
        for field in fields(cls):
            raw = env.get(f"TASKQ_{field.name.upper()}")
            if raw is not None and field.name != "redis_url":
                values[field.name] = _parse(field.name, raw, cls._field_type(field.name))
        values.update({k: v for k, v in overrides.items() if v is not None})
        return cls.build(**values)

    @classmethod
    def build(cls, **values: Any) -> Settings:
        """Like the constructor, but an unknown name is a :class:`ConfigError`."""
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise ConfigError(f"unknown setting(s): {', '.join(unknown)}; known: {sorted(known)}")
        return cls(**values)

    def replace(self, **changes: Any) -> Settings:
        """A copy with some settings changed."""
        return dataclasses.replace(self, **changes)

    @classmethod
    def _field_type(cls, name: str) -> type:
        return type(getattr(cls(), name))


_KINDS: dict[str, tuple[Callable[[Any], bool], str]] = {
    "str": (lambda v: isinstance(v, str), "a string"),
    "int": (lambda v: isinstance(v, int) and not isinstance(v, bool), "a whole number"),
    "float": (lambda v: isinstance(v, int | float) and not isinstance(v, bool), "a number"),
    "bool": (lambda v: isinstance(v, bool), "True or False"),
    "tuple[str, ...]": (
        lambda v: (
            isinstance(v, Sequence)
            and not isinstance(v, str | bytes)
            and all(isinstance(k, str) for k in v)
        ),
        "a list of strings (a list, not one string)",
    ),
    "Mapping[str, int]": (lambda v: isinstance(v, Mapping), 'a mapping such as {"tasks": 4}'),
}
"""What each annotation of :class:`Settings` accepts, and how the error says it."""


def _check_type(name: str, annotation: object, value: Any) -> None:
    accepts, wanted = _KINDS[str(annotation)]
    if not accepts(value):
        raise ConfigError(f"setting {name} must be {wanted}, not {value!r}")


def _check_scaling(s: Settings) -> None:
    for name in ("target_time_to_start_s", "autoscale_idle_s"):
        if not getattr(s, name) > 0:
            raise ConfigError(f"{name} must be > 0")
    if not s.scale_horizon_s >= 0:
        raise ConfigError("scale_horizon_s must be >= 0")


TLS_SCHEMES = ("rediss", "rediss+cluster", "rediss+sentinel")


def check_url_options(url: str) -> None:
    """Refuse ``ssl_*`` options on a URL without TLS: redis-py would pass them to a plain
    connection, which fails with a TypeError at the first command.

    Raises:
        ConfigError: naming the option and the scheme that takes it.
    """
    scheme, _, rest = url.partition("://")
    if scheme.lower() in TLS_SCHEMES:
        return
    for param in rest.partition("?")[2].split("&"):
        name = param.partition("=")[0]
        if name.lower().startswith("ssl_"):
            raise ConfigError(
                f"Redis URL {redact(url)!r}: {name}= is a TLS option; use a rediss:// URL "
                "(rediss+cluster://, rediss+sentinel://) or leave it out"
            )


def _checked_partitions(partitions: Mapping[str, int]) -> dict[str, int]:
    for name, n in partitions.items():
        check_queue_name(name)
        if not isinstance(n, int) or isinstance(n, bool) or n < 1:
            raise ConfigError(f"partitions of {name!r} must be an int >= 1, not {n!r}")
    return dict(partitions)


def _checked_names(queues: Sequence[str]) -> tuple[str, ...]:
    for name in queues:
        check_queue_name(name)
    return tuple(queues)


def _parse(name: str, raw: str, kind: type) -> Any:
    if kind is dict:  # "a=4,b=2"
        out = {}
        for item in (i.strip() for i in raw.split(",") if i.strip()):
            key, sep, value = item.partition("=")
            if not sep or not value.strip().isdigit():
                raise ConfigError(f"TASKQ_{name.upper()}={raw!r}: expected name=N,name=N")
            out[key.strip()] = int(value)
        return out
    if kind is tuple:
        return tuple(item.strip() for item in raw.split(",") if item.strip())
    if kind is bool:
        if raw.lower() in ("1", "true", "yes", "on"):
            return True
        if raw.lower() in ("0", "false", "no", "off", ""):
            return False
        raise ConfigError(f"TASKQ_{name.upper()}={raw!r} is not a boolean")
    try:
        return kind(raw)
    except ValueError:
        raise ConfigError(f"TASKQ_{name.upper()}={raw!r} is not a valid {kind.__name__}") from None


def redact(url: str) -> str:
    """The URL with any password replaced by ***: in its user part and in query parameters
    named like one (``password=``, ``ssl_password=``)."""
    scheme, sep, rest = url.partition("://")
    rest, qmark, query = rest.partition("?")
    creds, at, host = rest.rpartition("@")
    if at and ":" in creds:
        rest = f"{creds.split(':', 1)[0]}:***@{host}"
    if qmark:
        params = [
            f"{p.split('=', 1)[0]}=***" if "password" in p.split("=", 1)[0].lower() else p
            for p in query.split("&")
        ]
        rest += "?" + "&".join(params)
    return f"{scheme}{sep}{rest}"


def parse_queues(value: str) -> list[str]:
    """``"a, b"`` → ``["a", "b"]``, each name checked (``-Q`` and ``TASKQ_QUEUES``)."""
    names = [q.strip() for q in value.split(",") if q.strip()]
    if not names:
        raise ConfigError(f"no queue name in {value!r}")
    for name in names:
        check_queue_name(name)
    return names


@functools.lru_cache(maxsize=256)
def check_queue_name(queue: str) -> None:
    # A ':' would let one queue's keys collide with another's ("a:retry" vs "a").
    if not queue or ":" in queue or any(c.isspace() for c in queue):
        raise ConfigError(f"invalid queue name {queue!r}: must be non-empty, without ':' or spaces")
