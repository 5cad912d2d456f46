"""taskq with signed job bodies (the signing family, bench/features/signing_bench.py).

The family's drain and enqueue rounds need no app of their own: they run the main bench's
plain app (``bench/peers/taskq_app.py``, its ``noop`` task and its worker command line)
twice, once as it is (signing off) and once with :data:`ENV` set to :data:`KEY` in the
round's environment (signing on): the producer's ``App`` and the worker's read it, so the
producer signs every body and the worker runs only signed ones. The two halves differ in
that variable alone.

:data:`SIGNING` is the family's own round (:func:`bench.features.signing_bench.agent`): the
encode and decode micro-costs with and without a signer, and a check that the "on" setup does
what it claims (a producer with ``App(signing_keys=[KEY])`` writes signed bodies, and a worker
that gets only ``TASKQ_SIGNING_KEYS`` runs them and dead-letters an unsigned one).
"""

from __future__ import annotations

ENV = "TASKQ_SIGNING_KEYS"
KEY = "taskq-bench-signing-key-0123456789"  # a benchmark key, not a secret
QUEUE = "tasks"  # bench/peers/taskq_app.py's queue


def problem(family: str) -> str | None:
    """Why this taskq cannot sign (no ``signing_keys`` setting), or None."""
    import taskq

    try:
        app = taskq.App(redis_url="redis://127.0.0.1:1/0", queue=QUEUE, signing_keys=[KEY])
    except Exception as exc:  # ConfigError (unknown setting) on a taskq without signing
        why = str(exc).split(";")[0]  # ConfigError lists every known setting after the ";"
        return f"App does not accept signing_keys ({type(exc).__name__}: {why})"
    if getattr(app.settings, "signer", None) is None:
        return "App(signing_keys=...) has no signer"
    return None


class TaskqSigning:
    """What the family's own round needs: versions, and nothing to set up or close."""

    name = "taskq"
    packages = ("taskq", "redis", "hiredis", "msgpack")

    def setup(self) -> None:
        """Nothing: the round builds its apps itself."""

    def close(self) -> None:
        """Nothing to close."""


SIGNING = TaskqSigning()
