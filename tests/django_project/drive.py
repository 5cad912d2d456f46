"""The web side of tests/integration/test_django.py, in a process of its own (``django.setup()``
is for the life of a process; the test's own process stays free of it).

``python -m tests.django_project.drive STEP...`` prints one JSON line per step: what it
returned, and the streams in Redis after it (``XLEN`` of each).
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

import django
import redis

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.django_project.settings")
django.setup()

from django.core.management import call_command  # noqa: E402 - after setup
from django.db import connection, transaction  # noqa: E402
from django.test import Client  # noqa: E402

from taskq.contrib.django import DjangoConnections, get_app  # noqa: E402
from taskq.testing import drain  # noqa: E402
from tests.django_project.notes.models import Note  # noqa: E402
from tests.django_project.notes.tasks import process_note  # noqa: E402


def post(path: str, **data: str) -> dict[str, Any]:
    response = Client().post(path, data)
    return {"status": response.status_code, **response.json()}


def fork() -> dict[str, Any]:
    """A connection open before a fork: the child's child_start drops its copy (and opens
    its own), the parent's goes on working."""
    Note.objects.count()
    pid = os.fork()
    if pid == 0:
        DjangoConnections().child_start()
        dropped = connection.connection is None
        Note.objects.count()
        os._exit(0 if dropped else 3)
    _, status = os.waitpid(pid, 0)
    kept = connection.connection is not None
    return {"child_exit": os.waitstatus_to_exitcode(status), "parent_kept": kept,
            "parent_count": Note.objects.count()}  # fmt: skip


def drain_in_a_transaction() -> dict[str, Any]:
    """taskq.testing.drain() inside a transaction, as in a TestCase: the job runs on the
    test's connection (it sees the uncommitted row), and the transaction stays open."""
    with transaction.atomic():
        note = Note.objects.create(text="in a test")
        process_note.delay(note.pk)
        ran = drain(get_app())
        note.refresh_from_db()
        kept = connection.in_atomic_block and connection.connection is not None
        transaction.set_rollback(True)
    return {"ran": [o.kind for o in ran.outcomes], "seen": note.status, "kept": kept}


STEPS = {
    "migrate": lambda: call_command("migrate", run_syncdb=True, verbosity=0) or {},
    "rollback": lambda: post("/notes/", text="lost", rollback="1"),
    "commit": lambda: post("/notes/", text="kept"),
    "autocommit": lambda: post("/notes/now/", text="at once"),
    "fork": fork,
    "drain_in_a_transaction": drain_in_a_transaction,
}


def streams(r: redis.Redis) -> dict[str, int]:
    keys = [k.decode() for k in r.scan_iter("*", _type="stream")]
    return {k: r.xlen(k) for k in sorted(keys)}


if __name__ == "__main__":
    with redis.Redis.from_url(os.environ["TASKQ_REDIS_URL"]) as r:
        for step in sys.argv[1:]:
            print(json.dumps({**STEPS[step](), "streams": streams(r)}), flush=True)
