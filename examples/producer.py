"""Enqueue example jobs at every priority and follow them until each one has finished.

With a worker running (``taskq worker -A examples.tasks -c 2``)::

    python -m examples.producer [--jobs 12] [--slow-seconds 1] [--delay-seconds 2]

It sends quick jobs at high and normal priority, slow reports at low priority, one flaky job
that succeeds on its retry, one job that always fails (and ends in the dead-letter stream) and
one delayed job. It prints a line as each job finishes, and exits 0 once every job has either
finished or been dead-lettered (1 if ``--timeout`` passes first).
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Sequence
from dataclasses import dataclass

from examples import tasks
from taskq import Deadletters, Job


@dataclass
class Tracker:
    """The jobs of this run and which of them have finished."""

    jobs: dict[str, Job]
    finished: dict[str, str]
    started: float
    retried: int = 0
    dead: int = 0

    def report(self, job_id: str, line: str) -> None:
        self.finished[job_id] = line
        elapsed = time.monotonic() - self.started
        print(f"[{len(self.finished):>3}/{len(self.jobs)} {elapsed:5.1f}s] {line}", flush=True)

    @property
    def done(self) -> bool:
        return len(self.finished) == len(self.jobs)


def enqueue(n: int, slow_s: float, delay_s: float) -> list[Job]:
    """Send the example jobs; ``n`` quick and slow ones plus one flaky, failing and delayed."""
    third = max(1, n // 3)
    jobs = tasks.send_welcome_email.map(range(1, third + 1))  # high: the task's default
    jobs += tasks.resize_image.starmap((i, 800) for i in range(1, third + 1))  # normal
    jobs += [
        tasks.build_report.apply_async((f"R{i}",), {"seconds": slow_s}, priority="low")
        for i in range(1, max(1, n - 2 * third) + 1)
    ]
    jobs.append(tasks.fetch_exchange_rate.delay("EUR"))
    jobs.append(tasks.sync_to_legacy_crm.delay(42))
    jobs.append(tasks.send_reminder.apply_async((7,), countdown=delay_s))
    return jobs


def poll(tracker: Tracker, store: Deadletters) -> None:
    """Report the jobs that finished or died since the last poll."""
    waiting = [i for i in tracker.jobs if i not in tracker.finished]
    results = tasks.store().hmget(tasks.RESULTS_KEY, waiting)
    for job_id, raw in zip(waiting, results, strict=True):
        if raw is not None:
            record = json.loads(raw)
            retry_note = f" (attempt {record['attempt']})" if record["attempt"] > 1 else ""
            tracker.retried += record["attempt"] > 1
            name = record["task"].rsplit(".", 1)[-1]
            job = tracker.jobs[job_id]
            tracker.report(job_id, f"✓ {name:<20} {job.priority:<6} {record['result']}{retry_note}")
    for dead in store.newest(limit=len(tracker.jobs) + 50):
        if dead.job_id in tracker.jobs and dead.job_id not in tracker.finished:
            tracker.dead += 1
            name = dead.task.rsplit(".", 1)[-1]
            tracker.report(
                dead.job_id,
                f"✗ {name:<20} dead-lettered after {dead.attempts} attempts: "
                f"{dead.error_type}: {dead.error}",
            )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Enqueue example jobs and follow them.")
    parser.add_argument("--jobs", type=int, default=12, help="quick and slow jobs to send")
    parser.add_argument("--slow-seconds", type=float, default=1.0, help="length of a report")
    parser.add_argument("--delay-seconds", type=float, default=2.0, help="the delayed job's wait")
    parser.add_argument("--timeout", type=float, default=120.0, help="give up after this long")
    args = parser.parse_args(argv)

    app = tasks.app
    jobs = enqueue(args.jobs, args.slow_seconds, args.delay_seconds)
    counts = {p: sum(j.priority == p for j in jobs) for p in ("high", "normal", "low")}
    print(
        f"enqueued {len(jobs)} jobs on {app.settings.queue}: "
        + ", ".join(f"{c} {p}" for p, c in counts.items())
        + f"; one of them delayed by {args.delay_seconds:g}s",
        flush=True,
    )
    tracker = Tracker({j.id: j for j in jobs}, {}, time.monotonic())
    store = Deadletters.for_app(app)
    deadline = tracker.started + args.timeout
    while not tracker.done:
        if time.monotonic() > deadline:
            print(f"timed out with {len(jobs) - len(tracker.finished)} job(s) unfinished")
            print("is a worker running? taskq worker -A examples.tasks")
            return 1
        time.sleep(0.1)
        poll(tracker, store)
    ok = len(jobs) - tracker.dead
    print(
        f"all {len(jobs)} jobs finished in {time.monotonic() - tracker.started:.1f}s: "
        f"{ok} ok ({tracker.retried} after a retry), {tracker.dead} dead-lettered"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
