"""Database connections in a worker, handled as Django handles them around a request.

Django opens a connection on first use and closes it at the end of each request (or keeps
it for ``CONN_MAX_AGE`` seconds while it stays usable). A worker has no requests: without
this middleware, a child would keep one connection for its whole life, through server
restarts and failed transactions. And a connection must never cross a fork: two processes
talking over one socket corrupt each other's conversation with the server.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from django.db import connections, reset_queries

from taskq.middleware import Middleware

if TYPE_CHECKING:
    from taskq.context import JobContext
    from taskq.worker.outcome import Outcome


class DjangoConnections(Middleware):
    """``close_old_connections()`` before and after each job; nothing open across a fork.

    :func:`~taskq.contrib.django.get_app` adds it to the app it builds.
    """

    def worker_start(self, queues: Sequence[str]) -> None:
        # In the master, before the first fork: whatever Django setup (or an AppConfig's
        # ready()) opened is closed, so no child inherits it. The master uses no database.
        connections.close_all()

    def child_start(self) -> None:
        drop_inherited()

    def around_job(self, job: JobContext, run: Callable[[], Outcome]) -> Outcome:
        # What Django's request_started and request_finished signals do.
        reset_queries()  # with DEBUG on, queries are logged per connection until reset
        close_old_connections()
        try:
            return run()
        finally:
            close_old_connections()


def close_old_connections() -> None:
    """``django.db.close_old_connections()``, but for a connection inside a transaction: that
    transaction is its caller's (``taskq.testing.drain()`` in a ``TestCase``, which wraps each
    test in one), not a job's, and closing the connection would end it. Django's test client
    disconnects the same call from its request signals for that reason."""
    for conn in connections.all(initialized_only=True):
        if not conn.in_atomic_block:
            conn.close_if_unusable_or_obsolete()


def drop_inherited() -> None:
    """Close the connections this process inherited through a fork, without a word to the
    server: the socket is closed under the driver first, so its close() cannot tell the
    server goodbye on behalf of the parent, whose copy stays usable (Celery does the same)."""
    for conn in connections.all(initialized_only=True):
        fileno = getattr(conn.connection, "fileno", None)
        if callable(fileno):
            with contextlib.suppress(Exception):  # a driver without a socket of its own
                os.close(fileno())
        with contextlib.suppress(Exception):  # the driver's complaint about that socket
            conn.close()
