"""Dashboard bulk action benchmark: "cancel all that match" over 50,000 waiting jobs (budget:
under 30 s, progress at least every 2 s), for jobs without and with status records.

Runs the dashboard's own bulk runner (:class:`taskq.dashboard.queueview.Bulks`) against a
private ``redis-server``, polling its progress every 50 ms as the progress page would, and
prints the time taken and the longest gap between two progress changes. Exit status 2 if a
budget is missed.

    .venv/bin/python bench/features/dashboard_bulk_bench.py [--jobs N]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.common.redis_server import PrivateRedis
from taskq import App
from taskq.dashboard.queueview import Bulk, Bulks
from taskq.ops.jobrows import JobFilter

BUDGET_S, PROGRESS_EVERY_S = 30.0, 2.0


def watch(bulk: Bulk) -> float:
    """Poll until it ends; the longest time (s) its progress stood still."""
    longest, last, since = 0.0, (0, 0), time.monotonic()
    while not bulk.finished:
        time.sleep(0.05)
        now = (bulk.found, bulk.handled)
        if now != last:
            longest = max(longest, time.monotonic() - since)
            last, since = now, time.monotonic()
    return longest


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--jobs", type=int, default=50_000)
    args = parser.parse_args()
    failed = False
    with tempfile.TemporaryDirectory(prefix="taskq-bulk-bench-") as tmp:
        server = PrivateRedis(Path(tmp))
        server.start()
        try:
            app = App(server.url)

            @app.task(name="bench.recorded", store_result=True)
            def recorded(i: int) -> None: ...

            @app.task(name="bench.plain")
            def plain(i: int) -> None: ...

            for name, task in (("without records", plain), ("with records", recorded)):
                server.flush()
                for i in range(args.jobs):
                    task.delay(i)
                spec = dict(queue="tasks", state="waiting", priority="normal", where=JobFilter())
                bulk = Bulks().start(app, action="cancel", **spec)
                gap = watch(bulk)
                ok = bulk.elapsed_s < BUDGET_S and gap < PROGRESS_EVERY_S and not bulk.error
                failed |= not ok
                print(
                    f"cancel all {bulk.found:,} waiting jobs {name}: {bulk.elapsed_s:.2f} s, "
                    f"{bulk.done:,} cancelled, progress every <= {gap:.2f} s "
                    f"({'PASS' if ok else 'FAIL'}; budget {BUDGET_S:.0f} s, {PROGRESS_EVERY_S} s)"
                )
        finally:
            server.stop()
    return 2 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
