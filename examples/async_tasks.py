"""Example ``async def`` tasks: I/O-bound work on asyncio clients, many at once per process.

Run a worker for them with::

    taskq worker -A examples.async_tasks -c 2 --async-concurrency 50

(it serves the app's queue, ``aio``).
Each child of that worker runs one event loop and up to 50 of these jobs at once. They talk
to Redis with ``redis.asyncio`` (the app's Redis; taskq keeps its own connections to itself)
and to a slow "upstream service", played here by ``asyncio.sleep``: a real app would await an
HTTP client (httpx, aiohttp) or a database driver (asyncpg) the same way.
"""

from __future__ import annotations

import asyncio
import weakref

from redis import asyncio as aioredis

from taskq import App, current_job

app = App(queue="aio")
"""Its own queue: a worker of examples.tasks (the Procfile's ``worker``) never sees its jobs."""

RATES_KEY = "examples:rates"
"""Hash: currency -> the last rate the upstream service gave (a cache)."""
VISITS_KEY = "examples:visits"
UPSTREAM_LATENCY_S = 0.2
RATES = {"EUR": 1.08, "GBP": 1.27, "JPY": 0.0067}

_clients: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, aioredis.Redis] = (
    weakref.WeakKeyDictionary()
)


def store() -> aioredis.Redis:
    """The running loop's client for the examples' own data (one per event loop: a worker
    child has one; tests and eager mode may run several)."""
    loop = asyncio.get_running_loop()
    client = _clients.get(loop)
    if client is None:
        client = _clients[loop] = aioredis.Redis.from_url(app.settings.redis_url)
    return client


async def ask_upstream(currency: str) -> float:
    """The slow service a real task would call over HTTP."""
    await asyncio.sleep(UPSTREAM_LATENCY_S)
    try:
        return RATES[currency]
    except KeyError:
        raise ValueError(f"unknown currency {currency!r}") from None


@app.task(store_result=True, soft_time_limit_s=5, time_limit_s=30, max_retries=2)
async def quote(currency: str, amount: float) -> dict[str, object]:
    """Convert ``amount`` of ``currency`` to USD: the rate from upstream, cached in Redis."""
    currency = currency.upper()
    rate = await ask_upstream(currency)
    await store().hset(RATES_KEY, currency, rate)
    job = current_job()  # this coroutine's own job, though fifty run beside it
    return {
        "currency": currency,
        "amount": amount,
        "usd": round(amount * rate, 2),
        "job": job.id if job else None,
    }


@app.task
async def count_visit(page: str) -> None:
    """Fire and forget: one increment, no result kept."""
    await store().hincrby(VISITS_KEY, page, 1)
