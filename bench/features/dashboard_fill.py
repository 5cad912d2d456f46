"""The dashboard bench's fills of the pages added after the first ones: jobs set aside under a
pause, debounce bursts and filling batches in the gathering index, status records for the
records search, and a fair queue with a million active keys.

Every fill is a Lua loop per batch of members (no round trip per job), laying out the keys as
the scripts that write them in production do (``aside.lua``, ``debounce.lua``, ``batch.lua``,
``fair_enqueue.lua``, ``_record.lua``); each job gets its own id (32 hex digits, the ``tag``
first so that the fills never share one), written into a body encoded once, whose id sits
between ``prefix`` and ``suffix``.
"""

from __future__ import annotations

import time
from typing import Any

from taskq import App
from taskq.keys import GROUP, QueueKeys
from taskq.message import Message
from taskq.pauses import Pause

PLACEHOLDER_ID = "f" * 32
BATCH = 20_000
"""Members one script writes: Redis stays responsive between scripts."""

_ID = "local function id(i) return string.format('%x%031x', tonumber(ARGV[3]), i) end\n"

ASIDE = (
    _ID
    + """
local from, n = tonumber(ARGV[1]), tonumber(ARGV[2])
for i = from, from + n - 1 do
  redis.call('ZADD', KEYS[1], ARGV[4] + i, ARGV[5] .. ARGV[6] .. id(i) .. ARGV[7])
end
return n
"""
)
"""ARGV: from, n, tag, base score, member head, body prefix, body suffix."""

GATHER = (
    _ID
    + """
local from, n = tonumber(ARGV[1]), tonumber(ARGV[2])
local queue, now, base = ARGV[4], ARGV[5], tonumber(ARGV[6])
for i = from, from + n - 1 do
  local job = id(i)
  local body = ARGV[9] .. job .. ARGV[10]
  local due = base + 2 * i
  if i % 2 == 0 then
    local member = ARGV[8] .. body
    redis.call('ZADD', KEYS[1], due, member)
    redis.call('HSET', queue .. ':debounce:k' .. i, 'job', job, 'member', member,
      'first', now, 'count', 3)
    redis.call('ZADD', KEYS[2], due, 'debounce:k' .. i)
  else
    local list = queue .. ':batch:' .. ARGV[7] .. ':k' .. i
    for c = 0, 2 do
      local call = c == 0 and job or string.format('%s%02d', string.sub(job, 1, 30), c)
      redis.call('RPUSH', list, call .. '\\n' .. ARGV[9] .. call .. ARGV[10])
    end
    redis.call('ZADD', KEYS[1], due, '1\\n' .. ARGV[7] .. '\\n\\193batch\\n' .. list)
    redis.call('ZADD', KEYS[2], due, 'batch:' .. ARGV[7] .. ':k' .. i)
  end
end
return n
"""
)
"""KEYS: schedule, gathering. ARGV: from, n, tag, queue, now ms, base due, batching task,
debounce member head, body prefix, body suffix. Even numbers are bursts of 3 calls, odd ones
batches of 3 calls, so the index interleaves the two kinds."""

RECORDS = (
    _ID
    + """
local from, n = tonumber(ARGV[1]), tonumber(ARGV[2])
for i = from, from + n - 1 do
  redis.call('HSET', ARGV[4] .. id(i), unpack(ARGV, 5))
end
return n
"""
)
"""ARGV: from, n, tag, record key prefix, then the record's fields and values."""

FAIR = """
local from, n = tonumber(ARGV[1]), tonumber(ARGV[2])
local staged = cmsgpack.pack({'task', ARGV[3], 'body', ARGV[4]})
for i = from, from + n - 1 do
  local key = 'tenant-' .. i
  redis.call('RPUSH', ARGV[5] .. key, staged)
  redis.call('RPUSH', KEYS[1], key)
  redis.call('ZADD', KEYS[2], 1, key)
end
redis.call('INCRBY', KEYS[3], n)
return n
"""
"""KEYS: turns, waiting keys, staged count. ARGV: from, n, task, body, the staged lists' prefix.
Each key has one job staged, as ``fair_enqueue.lua`` leaves the jobs of a busy queue."""


def _loop(r: Any, script: str, keys: list[str], total: int, *args: Any) -> None:
    """``script`` over members 0..total-1, :data:`BATCH` per call."""
    sha = r.script_load(script)
    for start in range(0, total, BATCH):
        r.evalsha(sha, len(keys), *keys, start, min(BATCH, total - start), *args)


def _body(app: App, task: str, queue: str) -> tuple[bytes, bytes]:
    """A job body of ``task`` cut around its id: (prefix, suffix)."""
    msg = Message(task, (12345, {"customer": "acme"}), queue=queue, id=PLACEHOLDER_ID)
    prefix, _, suffix = app.encode(msg).partition(PLACEHOLDER_ID.encode())
    return prefix, suffix


def paused(app: App, r: Any, queue: str, total: int) -> str:
    """``total`` jobs of ``reports.build`` set aside under a pause of that task; its field."""
    k, pause = QueueKeys(queue), Pause(task="reports.build")
    now = int(time.time() * 1000)
    r.hset(k.paused, pause.field, now)
    head, body = b"1\nreports.build\n", _body(app, "reports.build", queue)
    _loop(r, ASIDE, [k.aside(pause.field)], total, 0xA, now - total, head, *body)
    return pause.field


def gathering(app: App, r: Any, queue: str, total: int) -> None:
    """``total`` members of the gathering index: half debounce bursts of ``reports.digest``
    (a hash and a schedule member each), half batches of ``reports.collect`` (a list of 3
    calls and a schedule marker each), due from an hour on."""
    k = QueueKeys(queue)
    now = int(time.time() * 1000)
    prefix, suffix = _body(app, "reports.digest", queue)
    args = (0xB, queue, now, now + 3_600_000, "reports.collect", b"1\nreports.digest\n")
    _loop(r, GATHER, [k.schedule, k.gathering], total, *args, prefix, suffix)


def records(r: Any, queue: str, total: int, model: dict[bytes, bytes]) -> None:
    """``total`` status records (``<queue>:job:<id>``) with the fields of ``model``."""
    fields = [x for kv in model.items() for x in kv]
    _loop(r, RECORDS, [], total, 0xC, QueueKeys(queue).job(""), *fields)


def fair(app: App, r: Any, queue: str, total: int) -> None:
    """A fair queue (mode ``on``) with ``total`` active keys, each with one job staged."""
    k = QueueKeys(queue)
    for stream in k.streams:
        r.xgroup_create(stream, GROUP, id="0", mkstream=True)
    r.set(k.fair_mode, "on")
    msg = Message("bench.fair", (12345, {"customer": "acme"}), queue=queue)
    keys = [k.fair_turns("normal"), k.fair_waiting, k.fair_staged_count("normal")]
    _loop(r, FAIR, keys, total, msg.task, app.encode(msg), k.fair_staged("normal", ""))
