"""Records search benchmark: what one page of ``taskq jobs search`` costs Redis with
1,000,000 status records (budget: no command over 10 ms).

Fills a private ``redis-server`` with records as the scripts leave them (a Lua loop of HSETs
per batch, every tenth one ``failed`` with an attempt), then walks ``--pages`` pages of a
search that matches almost nothing (an arguments substring: every record's fields are read
and rendered) through :class:`~taskq.ops.recordsearch.Records`. Redis's own timing of every
command (``SLOWLOG`` with a threshold of 0) gives the longest SCAN and HMGET; the wall time of
each page is measured too. Prints the table; exit status 2 if a command took over 10 ms.

    .venv/bin/python bench/features/records_search_bench.py [--records N] [--pages N]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import msgpack

from bench.common.redis_server import PrivateRedis
from bench.common.report import md_table
from taskq.broker.link import Link
from taskq.ops.jobrows import JobFilter
from taskq.ops.recordsearch import SCAN_COUNT, Records

BUDGET_US = 10_000
QUEUE = "tasks"

FILL = """
local from, n = tonumber(ARGV[1]), tonumber(ARGV[2])
for i = from, from + n - 1 do
  local key = string.format(ARGV[3], i)
  if i % 10 == 0 then
    redis.call('HSET', key, 'state', 'failed', 'task', 'reports.build', 'queue', 'tasks',
      'priority', 'normal', 'args', ARGV[4], 'enqueued_ms', 1780000000000 + i,
      'finished_ms', 1780000001000 + i, 'attempts', '1', 'attempt:1', ARGV[5])
  else
    redis.call('HSET', key, 'state', 'succeeded', 'task', 'reports.build', 'queue', 'tasks',
      'priority', 'normal', 'args', ARGV[4], 'enqueued_ms', 1780000000000 + i,
      'finished_ms', 1780000001000 + i, 'attempts', '0', 'result', ARGV[6])
  end
end
return n
"""
"""``n`` records ``tasks:job:r<i>`` (one script per batch: Redis stays responsive)."""


def fill(r: Any, total: int, batch: int = 20_000) -> None:
    sha = r.script_load(FILL)
    args = msgpack.packb([["order-42", {"lines": list(range(20))}], {"priority": "high"}])
    error = msgpack.packb(
        {"error_type": "TimeoutError", "error": "upstream", "traceback": "x" * 2000,
         "worker": "w", "finished_ms": 1}
    )  # fmt: skip
    result = msgpack.packb({"rows": list(range(200))})
    for done in range(0, total, batch):
        r.evalsha(sha, 0, done, min(batch, total - done), f"{QUEUE}:job:r%d", args, error, result)


def durations(r: Any) -> dict[str, list[int]]:
    """Command -> its calls' durations in µs, from SLOWLOG (every command logged)."""
    out: dict[str, list[int]] = {}
    for entry in r.slowlog_get(10_000_000):
        name = entry["command"].split(b" ", 1)[0].decode().upper()
        out.setdefault(name, []).append(int(entry["duration"]))
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--pages", type=int, default=200)
    opts = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        server = PrivateRedis(Path(tmp))
        server.start()
        try:
            r = server.client()
            started = time.monotonic()
            fill(r, opts.records)
            fill_s = time.monotonic() - started
            memory_mb = r.info("memory")["used_memory"] / 1e6
            link = Link(r, f"redis://127.0.0.1:{server.port}/0")
            records, where = Records(link, QUEUE), JobFilter(args="order-9999")
            r.config_set("slowlog-log-slower-than", 0)
            r.config_set("slowlog-max-len", 10_000_000)
            r.slowlog_reset()
            page_ms, scanned, cursor = [], 0, None
            for _ in range(opts.pages):
                t0 = time.perf_counter()
                page = records.page(where, cursor=cursor)
                page_ms.append((time.perf_counter() - t0) * 1000)
                scanned += page.scanned
                cursor = page.cursor
                if cursor is None:
                    break
            took = durations(r)
        finally:
            server.stop()
    rows = [
        ["records", f"{opts.records:,}", f"filled in {fill_s:.1f} s, {memory_mb:.0f} MB"],
        ["pages walked", str(len(page_ms)), f"{scanned:,} records read (COUNT {SCAN_COUNT})"],
        ["page wall time p50 / p95 / max", "ms",
         " / ".join(f"{v:.1f}" for v in (statistics.median(page_ms),
                                          statistics.quantiles(page_ms, n=20)[-1], max(page_ms)))],
    ]  # fmt: skip
    for name in ("SCAN", "HMGET"):
        us = sorted(took.get(name, [0]))
        shown = f"{statistics.median(us)} / {us[int(len(us) * 0.99)]} / {us[-1]}"
        rows.append([f"{name} p50 / p99 / max (Redis's own time)", "µs",
                     f"{shown} over {len(us):,} calls"])  # fmt: skip
    print(md_table(["measure", "unit", "value"], rows))
    over = max(max(us) for us in took.values()) > BUDGET_US
    return 2 if over else 0


if __name__ == "__main__":
    sys.exit(main())
