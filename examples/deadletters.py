"""Dead-letter handling: be told when a job dies, then look at it and send it again.

A job that fails more often than its ``max_retries`` allows, is malformed, or names a task the
worker does not know moves to the queue's dead-letter stream (``<queue>:deadletter``) with its
error, traceback and attempt count. It stays there until someone retries or purges it.

Two halves:

- :class:`DeadLetterAlert` is middleware: its ``after_job`` hook runs in the worker for every
  finished job, so it can page someone when a job dies (here it logs a warning).
  ``examples/tasks.py`` installs it with ``app.add_middleware(DeadLetterAlert())``.
- :func:`main` works on the stored dead letters from Python, the same operations as the
  ``taskq deadletter`` command::

      python -m examples.deadletters                       # list, newest first
      python -m examples.deadletters --retry TASK_NAME     # re-enqueue one task's dead jobs
      python -m examples.deadletters --purge-older-than-days 7
"""

from __future__ import annotations

import argparse
import logging
import time
from collections.abc import Sequence

from taskq import Deadletter, Deadletters
from taskq.middleware import Middleware
from taskq.worker.outcome import DEAD, Outcome

logger = logging.getLogger(__name__)


class DeadLetterAlert(Middleware):
    """Logs a warning for every job that moves to the dead-letter stream."""

    def after_job(self, outcome: Outcome) -> None:
        if outcome.kind != DEAD:
            return
        task = outcome.msg.task if outcome.msg else "?"
        job_id = outcome.msg.id if outcome.msg else outcome.delivery.entry_id
        logger.warning(
            "ALERT dead letter: %s[%s] after %d attempt(s): %s: %s",
            task,
            job_id,
            outcome.attempt,
            outcome.error_type,
            outcome.error,
        )


def _now_ms() -> int:
    return int(time.time() * 1000)


def describe(job: Deadletter) -> str:
    """One line per dead job."""
    age_s = (_now_ms() - job.last_failure_ms) / 1000
    return (
        f"{job.dead_id}  {job.task}  job {job.job_id}  attempts={job.attempts}  "
        f"{job.error_type}: {job.error[:60]}  ({age_s:.0f}s ago)"
    )


def main(argv: Sequence[str] | None = None) -> int:
    from examples.tasks import app

    parser = argparse.ArgumentParser(description="List, retry or purge dead-lettered jobs.")
    parser.add_argument("--retry", metavar="TASK", help="re-enqueue the dead jobs of this task")
    parser.add_argument("--purge-older-than-days", type=float, metavar="DAYS")
    parser.add_argument("-n", "--limit", type=int, default=20)
    args = parser.parse_args(argv)

    store = Deadletters.for_app(app)
    if args.retry:
        ids = [j.dead_id for j in store.newest(limit=10_000) if j.task == args.retry]
        moved, skipped = store.retry(ids)
        print(f"re-enqueued {moved} dead job(s) of {args.retry}")
        for dead_id, reason in skipped:
            print(f"  not {dead_id}: {reason}")
    elif args.purge_older_than_days is not None:
        cutoff_ms = _now_ms() - int(args.purge_older_than_days * 86_400_000)
        print(f"purged {store.purge(older_than_ms=cutoff_ms)} dead job(s)")
    else:
        jobs = store.newest(limit=args.limit)
        print(f"{store.count()} dead-lettered job(s) in {store.key}")
        for job in jobs:
            print("  " + describe(job))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
