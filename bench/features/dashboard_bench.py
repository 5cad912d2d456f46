"""Dashboard benchmark: how long each page takes to answer (budget: p95 under 200 ms) with
1,000,000 waiting jobs, 1,000,000 retrying, 1,000,000 scheduled, 10,000 dead letters,
1,000,000 jobs set aside under a pause, 1,000,000 members of the gathering index (500,000
debounce bursts and 500,000 filling batches of 3 calls each), 1,000,000 status records, and
a fair queue with 1,000,000 active keys (:mod:`bench.features.dashboard_fill`).

Fills a private ``redis-server`` in about a minute (a Lua loop per batch, no round trip per
job; 2.6 GB), adds a worker's heartbeat record with busy children, one job with a status record and
a minute of throughput, starts ``taskq dashboard`` as its own process, then times each page
over HTTP (warm-up first; p50, p95 and max of ``--requests`` requests). Prints the table and
writes the "Dashboard" section of ``bench/results/RESULTS-features.md``. Exit status 2 if a page's
p95 is over the budget.

    .venv/bin/python bench/features/dashboard_bench.py [--quick]
"""

from __future__ import annotations

import argparse
import datetime as dt
import http.client
import json
import os
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.common.redis_server import PrivateRedis
from bench.common.report import md_table
from bench.features import dashboard_fill
from bench.features.section import write_section
from taskq import App
from taskq.broker.series import Series, minute_of
from taskq.broker.workers import WorkerRegistry
from taskq.dashboard.queueview import PAGE_SIZE
from taskq.deadletter import WRITTEN, Deadletter
from taskq.keys import GROUP, QueueKeys
from taskq.message import Message
from taskq.ops.deadletters import SCAN_LIMIT
from taskq.ops.devserver import free_port
from taskq.ops.recordsearch import SCAN_COUNT
from taskq.worker.outcome import JobCounts
from taskq.worker.record import ChildRecord, WorkerRecord

BUDGET_MS = 200.0
ROOT = Path(__file__).resolve().parents[2]
QUEUE = "tasks"
FAIR_QUEUE = "fair"

FILL = """
local n = tonumber(ARGV[1])
for i = 1, n do
  redis.call('XADD', KEYS[1], '*', unpack(ARGV, 2))
end
return n
"""
"""XADD the same fields ``n`` times (one script per batch: Redis stays responsive)."""

ZFILL = """
local from, n = tonumber(ARGV[1]), tonumber(ARGV[2])
for i = from, from + n - 1 do
  redis.call('ZADD', KEYS[1], ARGV[3] + i, string.format(ARGV[4], i))
end
return n
"""
"""ZADD ``n`` members made from a format with the member's number (scores from a base)."""


def zfill(r: Any, key: str, total: int, base_ms: int, member: bytes, batch: int = 50_000) -> None:
    """``total`` members ``member % i`` (a ``%d`` in it keeps them apart) due from ``base_ms``."""
    sha = r.script_load(ZFILL)
    done = 0
    while done < total:
        n = min(batch, total - done)
        r.evalsha(sha, 1, key, done, n, base_ms, member)
        done += n


def fill(r: Any, key: str, total: int, fields: list[Any], batch: int = 50_000) -> None:
    sha = r.script_load(FILL)
    done = 0
    while done < total:
        n = min(batch, total - done)
        r.evalsha(sha, 1, key, n, *fields)
        done += n


def seed(app: App, r: Any, waiting: int, dead: int) -> dict[str, str]:
    """The big queue, its dead letters, a worker, a tracked job; returns ids to visit."""
    k = QueueKeys(QUEUE)
    for stream in k.streams:
        r.xgroup_create(stream, GROUP, id="0", mkstream=True)
    msg = Message("reports.build", (12345, {"customer": "acme"}), queue=QUEUE)
    fill(r, k.stream("normal"), waiting, ["task", msg.task, "body", app.encode(msg)])
    entry = Deadletter(
        dead_id="",
        task="reports.build",
        job_id=msg.id,
        body=app.encode(msg),
        error_type="TimeoutError",
        error="upstream did not answer in 30s",
        traceback="Traceback (most recent call last):\n  ...\nTimeoutError: upstream\n" * 4,
        attempts=4,
        first_failure_ms=0,
        last_failure_ms=0,
        worker="bench:1:abcdef:1:2",
        stream=k.stream("normal"),
        entry_id="1-0",
    )
    values = dict(zip(WRITTEN, entry.to_fields()[1::2], strict=True))
    now = int(time.time() * 1000)
    values.update(first_failure_ms=now - 60_000, last_failure_ms=now)
    fill(r, k.deadletter, dead, [x for kv in values.items() for x in kv])
    tracked_job = app.enqueue(tracked.message((1, 2), {}))
    _worker(app)
    minute = minute_of(Series(app.link).link_ms())
    Series(app.link).write([QUEUE], "bench:1:abcdef", minute, (1200, 30, 25, 5))
    middle = r.xrange(k.deadletter, count=dead // 2)[-1][0].decode()
    body = app.encode(msg).replace(b"%", b"%%")
    zfill(r, k.retry("normal"), waiting, now + 3_600_000, b"%d\n1\nreports.build\n" + body)
    zfill(r, k.schedule, waiting, now + 3_600_000, b"1\nreports.build.%d\n" + body)
    r.xreadgroup(GROUP, "bench:1:abcdef:1:1001", {k.stream("normal"): ">"}, count=8)
    after = r.xrange(k.stream("normal"), count=waiting // 2)[-1][0].decode()
    ids = {"job": tracked_job.id, "dead": middle, "before": middle, "after": after}
    dashboard_fill.paused(app, r, QUEUE, waiting)
    dashboard_fill.gathering(app, r, QUEUE, waiting)
    dashboard_fill.records(r, QUEUE, waiting, r.hgetall(k.job(tracked_job.id)))
    dashboard_fill.fair(app, r, FAIR_QUEUE, waiting)
    return {**ids, "rank": str(waiting // 2)}


def _worker(app: App) -> None:
    children = tuple(
        ChildRecord(
            i,
            1000 + i,
            f"bench:1:abcdef:{i}:{1000 + i}",
            "reports.build",
            f"j{i}",
            f"{QUEUE}:normal",
            f"{i}-0",
            1500,
        )
        for i in range(1, 9)
    )
    record = WorkerRecord(
        id="bench:1:abcdef",
        host="bench",
        pid=1,
        version="bench",
        app="bench",
        uptime_ms=60_000,
        visibility_timeout_ms=30_000,
        concurrency=8,
        queues=(QUEUE,),
        tasks=("reports.build",),
        counts=JobCounts(1200, 30, 25, 5),
        rate_per_s=20.0,
        children=children,
    )
    WorkerRegistry(app.link, [QUEUE]).heartbeat(
        record.id, record.to_fields(), ttl_ms=3_600_000, visibility_timeout_ms=30_000
    )


def pages(ids: dict[str, str]) -> list[tuple[str, str]]:
    return [
        ("overview", "/"),
        ("overview, live block", "/?part=live"),
        ("overview JSON (= inspect --json)", "/api/overview"),
        ("workers", "/workers"),
        ("job", f"/jobs/{ids['job']}"),
        ("dead letters, newest", "/deadletters"),
        ("dead letters, a middle page", f"/deadletters?before={ids['before']}"),
        (f"dead letters, search, no match ({SCAN_LIMIT:,} read)", "/deadletters?error=nothing"),
        ("dead letter", f"/deadletters/{QUEUE}/{ids['dead']}"),
        ("periodic", "/periodic"),
        ("queue: waiting, first page", f"/queues/{QUEUE}/waiting"),
        ("queue: waiting, a middle page", f"/queues/{QUEUE}/waiting?after={ids['after']}"),
        (
            f"queue: waiting, search, no match ({SCAN_LIMIT:,} read)",
            f"/queues/{QUEUE}/waiting?args=nothing",
        ),
        ("queue: running", f"/queues/{QUEUE}/running"),
        ("queue: retrying, first page", f"/queues/{QUEUE}/retrying"),
        ("queue: retrying, a middle page", f"/queues/{QUEUE}/retrying?after={ids['rank']}"),
        ("queue: scheduled, a middle page", f"/queues/{QUEUE}/scheduled?after={ids['rank']}"),
        ("queue: waiting JSON", f"/api/queues/{QUEUE}/waiting"),
        ("queue: paused, first page", f"/queues/{QUEUE}/paused"),
        ("queue: paused, a middle page", f"/queues/{QUEUE}/paused?after={ids['rank']}"),
        ("queue: debounced, first page", f"/queues/{QUEUE}/debounced"),
        ("queue: debounced, a middle page", f"/queues/{QUEUE}/debounced?after={ids['rank']}"),
        ("queue: batching, first page", f"/queues/{QUEUE}/batching"),
        ("queue: batching, a middle page", f"/queues/{QUEUE}/batching?after={ids['rank']}"),
        ("records search, first page", f"/queues/{QUEUE}/search"),
        (
            f"records search, no match ({SCAN_COUNT:,} keys walked)",
            f"/queues/{QUEUE}/search?args=nothing",
        ),
        ("fair queue: waiting, first page", f"/queues/{FAIR_QUEUE}/waiting"),
        ("tasks", "/tasks"),
    ]


def time_page(port: int, path: str, requests: int) -> list[float]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    out = []
    for i in range(requests + 3):
        started = time.perf_counter()
        conn.request("GET", path)
        response = conn.getresponse()
        response.read()
        if response.status != 200:
            raise RuntimeError(f"{path}: HTTP {response.status}")
        if i >= 3:  # warm-up: connections, script loading, template compilation
            out.append((time.perf_counter() - started) * 1000)
    conn.close()
    return out


def check_pages(port: int, filled: int) -> None:
    """The filled pages show what was filled (else their timings would measure empty pages):
    a full page of rows each, the paused figure and the fair queue's active keys."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)

    def get(path: str) -> Any:
        conn.request("GET", path)
        return json.loads(conn.getresponse().read())

    for state in ("paused", "debounced", "batching"):
        doc = get(f"/api/queues/{QUEUE}/{state}")
        if len(doc["rows"]) != PAGE_SIZE:
            raise RuntimeError(f"{state}: {len(doc['rows'])} rows, not {PAGE_SIZE}")
    if doc["figures"]["paused"] != filled or not get(f"/api/queues/{QUEUE}/search")["rows"]:
        raise RuntimeError(f"paused figure {doc['figures']['paused']}, or no records found")
    fair = get(f"/api/queues/{FAIR_QUEUE}/waiting")
    if fair["fair"]["active_keys"] != filled or len(fair["rows"]) != PAGE_SIZE:
        raise RuntimeError(f"fair queue: {fair['fair']['active_keys']} keys")
    conn.close()


def start_dashboard(redis_url: str, port: int, log: Path) -> subprocess.Popen[bytes]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TASKQ_REDIS_URL": redis_url}
    cmd = [sys.executable, "-m", "taskq", "-A", "bench.features.dashboard_bench:app", "dashboard"]
    with open(log, "ab") as out:
        proc = subprocess.Popen(
            [*cmd, "--port", str(port)], cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT
        )
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        try:
            http.client.HTTPConnection("127.0.0.1", port, timeout=1).request("GET", "/static/x")
            return proc
        except OSError:
            time.sleep(0.1)
    proc.kill()
    raise RuntimeError(f"dashboard did not start: {log.read_text()}")


app = App()  # the dashboard process's app: TASKQ_REDIS_URL


@app.task(name="bench.tracked", store_result=True)
def tracked(a: int, b: int) -> int:
    return a + b


@app.task(name="bench.fair", queue=FAIR_QUEUE)
def fair_job(n: int, extra: dict[str, str]) -> None:
    """A task of the fair queue: it makes the queue one of the app's, for its pages."""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="100,000 waiting, 1,000 dead")
    parser.add_argument("--requests", type=int, default=30)
    args = parser.parse_args()
    waiting, dead = (100_000, 1_000) if args.quick else (1_000_000, 10_000)
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="taskq-dash-bench-") as tmp:
        server = PrivateRedis(Path(tmp))
        server.start()
        proc = None
        try:
            r = server.client()
            bench_app = App(server.url)
            t0 = time.monotonic()
            ids = seed(bench_app, r, waiting, dead)
            fill_s = time.monotonic() - t0
            port = free_port()
            proc = start_dashboard(server.url, port, Path(tmp) / "dashboard.log")
            check_pages(port, waiting)
            rows = []
            for name, path in pages(ids):
                ms = time_page(port, path, args.requests)
                p95 = statistics.quantiles(ms, n=20, method="inclusive")[-1]
                verdict = "PASS" if p95 < BUDGET_MS else "FAIL"
                rows.append(
                    [
                        name,
                        f"`{path}`",
                        f"{statistics.median(ms):.1f}",
                        f"{p95:.1f}",
                        f"{max(ms):.1f}",
                        verdict,
                    ]
                )
            redis_version = server.version()
            stream_len = r.xlen(QueueKeys(QUEUE).stream("normal"))
            dead_len = r.xlen(QueueKeys(QUEUE).deadletter)
            memory = r.info("memory")["used_memory_human"]
            keys = r.dbsize()
        finally:
            if proc is not None:
                proc.send_signal(signal.SIGTERM)
                proc.wait(10)
            server.stop()
    table = md_table(["page", "path", "p50 (ms)", "p95 (ms)", "max (ms)", "< 200 ms"], rows)
    markdown = "\n".join(
        [
            "## Dashboard",
            "",
            f"- Date: {dt.datetime.now(dt.timezone.utc).isoformat(timespec='seconds')} "
            f"(took {(time.monotonic() - started) / 60:.1f} min)",
            "- Command, from the repository root: "
            "`.venv/bin/python bench/features/dashboard_bench.py"
            f"{' --quick' if args.quick else ''}`",
            f"- Machine: {os.cpu_count()} cores, {platform.platform()}; the dashboard, the HTTP "
            "client and Redis share these cores",
            f"- Redis: private `redis-server` {redis_version}, no persistence; `{QUEUE}:normal` "
            f"holds {stream_len:,} waiting jobs (and {waiting:,} retrying, {waiting:,} "
            f"scheduled), `{QUEUE}:deadletter` {dead_len:,} entries; {waiting:,} jobs set "
            f"aside under a pause of one task (`{QUEUE}:held:paused:13:reports.build:`); a "
            "gathering index of "
            f"{waiting:,} members, {waiting // 2:,} debounce bursts (a hash and a schedule "
            f"member each) and {waiting // 2:,} filling batches (a list of 3 calls each), "
            f"interleaved; {waiting:,} status records (`{QUEUE}:job:*`); a fair queue "
            f"`{FAIR_QUEUE}` (mode `on`) with {waiting:,} active keys, one admitted job each; "
            f"{keys:,} keys, {memory} used (filled in {fill_s:.1f} s by Lua loops); one "
            "worker record with 8 busy children; one job with a status record",
            f"- Method: `taskq dashboard` as its own process (uvicorn); per page, 3 warm-up "
            f"requests then {args.requests} timed ones, one at a time on one keep-alive "
            "connection, from request sent to body read; budget: p95 < 200 ms",
            "",
            table,
        ]
    )
    print(markdown)
    key = "dashboard"
    write_section(key, {"markdown": markdown, "rows": rows}, args.quick)
    return 2 if any(row[-1] == "FAIL" for row in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
