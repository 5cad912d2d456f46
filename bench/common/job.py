"""The body of every system's benchmark task: one record, then one Redis ``INCR``.

:func:`job` is the same for taskq and every peer. It first calls
:func:`bench.common.record.record` (the start time the harness reads), then makes one
``INCR`` of :data:`COUNTER` on the bench's Redis: the "no-op plus one Redis call
per job" shape the targets are for. The client is created lazily in each
process, after any fork, and is shared by that process's threads (redis-py
clients are thread-safe through their connection pool). It sends nothing but
the ``INCR``s (RESP2: no ``HELLO`` or ``CLIENT SETINFO`` on connect), so the only command the bench
adds to a system's Redis traffic is the ``INCR``, which the Redis-time figures
subtract (see :mod:`bench.common.redistime`).

``BENCH_TASK_INCR=0`` (``run.py --no-incr``) drops the ``INCR``: a pure no-op.
"""

from __future__ import annotations

import os
import threading
from typing import Any

from redis import Redis

from bench.common.record import record

COUNTER = "bench:incr"
ENV_INCR = "BENCH_TASK_INCR"
ENV_URL = "BENCH_REDIS_URL"

_pid = -1  # process that owns _client
_client: Redis | None = None
_lock = threading.Lock()


def _reset_lock() -> None:
    global _lock
    _lock = threading.Lock()


os.register_at_fork(after_in_child=_reset_lock)


def incr_enabled() -> bool:
    """True unless the harness asked for the pure no-op shape."""
    return os.environ.get(ENV_INCR, "1") != "0"


def counter_client(url: str, **kwargs: Any) -> Redis:
    """A client that sends only the commands it is asked to (no HELLO, no CLIENT SETINFO)."""
    return Redis.from_url(url, protocol=2, lib_name=None, lib_version=None, **kwargs)


def _get_client() -> Redis | None:
    """This process's client (created on first use), None outside the bench or without INCR."""
    global _pid, _client
    with _lock:
        if _pid != os.getpid():
            url = os.environ.get(ENV_URL)
            _client = counter_client(url) if url and incr_enabled() else None
            _pid = os.getpid()
    return _client


def job(i: int) -> None:
    """Record that job ``i`` starts now, then make the job's one Redis call."""
    record(i)
    client = _client if _pid == os.getpid() else _get_client()
    if client is not None:
        client.execute_command("INCR", COUNTER)  # redis-py's incr() would send INCRBY
