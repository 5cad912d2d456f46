"""Tasks the tests run in worker subprocesses. Each records its run in Redis (list ``runs``)."""

from __future__ import annotations

import gc
import logging
import os
import time

import msgpack
import redis

import taskq
from taskq import App, Retry, current_job
from taskq.keys import GROUP, stream_key

app = App()  # configured by TASKQ_* variables set by the test fixtures
_client: redis.Redis | None = None


def _redis() -> redis.Redis:
    global _client
    if _client is None:
        _client = redis.Redis.from_url(app.settings.redis_url)
    return _client


def record(**fields: object) -> None:
    """Append one run record: job id, attempt, pid, start/end time and the given fields."""
    job = current_job()
    base = {
        "job": job.id if job else None,
        "attempt": job.attempt if job else 0,
        "pid": os.getpid(),
        "t": time.time(),
    }
    _redis().rpush("runs", msgpack.packb({**base, **fields}))


@app.task
def echo(value: object) -> None:
    record(value=value)


@app.task
def count_frozen() -> None:
    """Records how many objects the collector leaves alone (frozen before the fork)."""
    record(frozen=gc.get_freeze_count())


@app.task(priority="high")
def urgent(value: object) -> None:
    record(value=value)


@app.task
def sleepy(seconds: float, tag: str = "") -> None:
    """Sleeps; pushes its tag to the list ``started`` first, so tests can see it running."""
    start = time.time()
    _redis().rpush("started", tag)
    time.sleep(seconds)
    record(tag=tag, start=start, end=time.time())


@app.task
def spin(seconds: float) -> None:
    """CPU-bound: holds the GIL for ``seconds``."""
    start = time.time()
    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline:
        pass
    record(start=start, end=time.time())


@app.task
def always_fails(tag: str = "") -> None:
    record(tag=tag)
    raise RuntimeError(f"boom {tag}")


@app.task(max_retries=3)
def flaky(succeed_on: int) -> None:
    job = current_job()
    assert job is not None
    record(tag="flaky")
    if job.attempt < succeed_on:
        raise Retry(countdown=0.05)


@app.task(dont_autoretry_for=(ValueError,))
def rejects(tag: str = "") -> None:
    record(tag=tag)
    raise ValueError("not retryable")


@app.task
def crash(tag: str = "") -> None:
    """Kills its own process, like a segfault."""
    record(tag=tag)
    os.kill(os.getpid(), 9)


@app.task(time_limit_s=1.0, soft_time_limit_s=0.5)
def overruns(seconds: float) -> None:
    try:
        time.sleep(seconds)
    except taskq.SoftTimeLimitExceeded:
        record(tag="soft")
        raise


@app.task
def mark(n: int, seconds: float = 0.0) -> None:
    """Append "<job id> <attempt>" to a per-process file under TASKQ_TEST_MARK_DIR.

    Files, not Redis, so the record survives a Redis crash that the test causes.
    """
    if seconds:
        time.sleep(seconds)
    job = current_job()
    assert job is not None
    path = os.path.join(os.environ["TASKQ_TEST_MARK_DIR"], f"{os.getpid()}.log")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.write(fd, f"{job.id} {job.attempt}\n".encode())
    finally:
        os.close(fd)


# -- tasks for crashes, retries and prefetch (integration/test_failures.py, test_worker.py) ----

UNDECODABLE = b"bad \xff\xfe bytes".decode("utf-8", "surrogateescape")
"""An exception message with lone surrogates (what os.fsdecode makes of non-UTF-8 bytes)."""


@app.task
def sleepy_traced(seconds: float, tag: str = "") -> None:
    """Like ``sleepy``, but pushes a run record (pid, start time) to the list ``starts`` first."""
    job = current_job()
    start = time.time()
    entry = {"job": job.id if job else None, "pid": os.getpid(), "start": start, "tag": tag}
    _redis().rpush("starts", msgpack.packb(entry))
    time.sleep(seconds)
    record(tag=tag, start=start, end=time.time())


@app.task(max_retries=1)
def signals_itself(signum: int) -> None:
    """Kills its own process with ``signum`` (e.g. a real-time signal, outside signal.Signals)."""
    record(tag=f"signal {signum}")
    os.kill(os.getpid(), signum)


@app.task(max_retries=10_000)
def fails_with_many_retries(tag: str = "") -> None:
    record(tag=tag)
    raise RuntimeError(f"boom {tag}")


@app.task
def retries_with_countdown(countdown: object) -> None:
    """Raises Retry with whatever ``countdown`` it is given (even a str or inf)."""
    record(tag=repr(countdown))
    raise Retry(countdown=countdown)  # type: ignore[arg-type]


@app.task(dont_autoretry_for=(ValueError,))
def rejects_undecodable() -> None:
    record(tag="rejects_undecodable")
    raise ValueError(UNDECODABLE)


@app.task
def fails_undecodable() -> None:
    record(tag="fails_undecodable")
    raise RuntimeError(UNDECODABLE)


@app.task
def bad_retry() -> None:
    record(tag="bad_retry")
    raise Retry(countdown="5")  # type: ignore[arg-type]


@app.task
def stamp(tag: str = "") -> None:
    """Records its priority, tag and start time (adaptive prefetch and timing tests)."""
    job = current_job()
    record(tag=tag, priority=job.priority if job else "", start=time.time())


@app.task
def stamp_delivery() -> None:
    """Records its priority and, by Redis' clock (ms), when its stream entry was added and
    when it was delivered (the entry is pending until the next fetch acks it): what strict
    priority is about, which start times on a loaded machine only approximate."""
    job = current_job()
    assert job is not None and job.entry_id is not None
    info = _redis().execute_command(
        "XINFO", "STREAM", stream_key(job.queue, job.priority), "FULL", "COUNT", 0
    )
    delivered = [
        int(pending[2])
        for group in info[b"groups"]
        if group[b"name"] == GROUP.encode()
        for pending in group[b"pending"]
        if pending[0].decode() == job.entry_id
    ]
    record(
        priority=job.priority,
        added_ms=int(job.entry_id.partition("-")[0]),
        delivered_ms=delivered[0] if delivered else None,
    )


@app.task(max_retries=1)
def flaky_once(countdown: float, n: int = 0) -> None:
    """Fails its first attempt with ``Retry(countdown=...)``, records its second."""
    job = current_job()
    if job is not None and job.attempt == 1:
        raise Retry(countdown=countdown)
    record(tag="retried", start=time.time(), retry_of=n)


# -- tasks that store their results (tests/integration/test_results.py) ------------------------


@app.task(store_result=True)
def add(a: int, b: int) -> int:
    return a + b


@app.task(store_result=True)
def slow_add(a: int, b: int, seconds: float = 0.5) -> int:
    """Pushes its job id to the list ``started``, then sleeps (tests see it running)."""
    global _client
    if _client is None:
        _client = redis.Redis.from_url(app.settings.redis_url)
    job = current_job()
    _client.rpush("started", job.id if job else "")
    time.sleep(seconds)
    record(tag="slow_add")
    return a + b


@app.task(store_result=True, max_retries=0)
def fails_stored(message: str) -> None:
    raise KeyError(message)


@app.task(store_result=True, max_retries=2)
def fails_then_adds(a: int, b: int, seconds: float = 0.3) -> int:
    """Attempt 1 sleeps and then fails with a retry due in 1 s; attempt 2 returns a + b."""
    job = current_job()
    assert job is not None
    if job.attempt == 1:
        time.sleep(seconds)
        raise Retry(countdown=1.0, reason="first attempt fails")
    return a + b


@app.task(store_result=True)
def returns_object() -> object:
    return object()


@app.task(store_result=True)
def returns_bytes(n: int) -> bytes:
    return b"x" * n


@app.task(store_result=True, result_ttl_s=1)
def short_lived(value: int) -> int:
    return value


# -- workflow tasks (tests/integration/test_workflows.py) ------------------------------------


@app.task(store_result=True)
def tsum(values: list[int], extra: int = 0) -> int:
    """A chord body: records its run (the tests count body runs), returns the sum."""
    record(tag="tsum", n=len(values))
    return sum(values) + extra


@app.task(store_result=True)
def collect(values: list[object]) -> list[object]:
    """A chord body that returns the header results as they came."""
    record(tag="collect", n=len(values))
    return values


@app.task(store_result=True)
def square(x: int, seconds: float = 0.0) -> int:
    if seconds:
        time.sleep(seconds)
    return x * x


@app.task(store_result=True)
def errback(failed_job_id: str) -> str:
    """A link_error callback: records the id of the job that failed."""
    record(tag="errback", failed=failed_job_id)
    return failed_job_id


@app.task(store_result=True)
def tag(value: object, label: str) -> list[object]:
    record(tag=label, got=value)
    return [label, value]


@app.task(queue="ptick")
def tick(tag: str) -> None:
    """A periodic job: records its tick (``scheduled_ms``)."""
    job = current_job()
    record(tag=tag, tick=job.scheduled_ms if job else None)


# Periodic schedules live on queues of their own, so only workers started with -Q ptick or
# -Q pall run them (every other test's worker serves "tasks").
app.add_periodic(tick, every=1, args=("one",), name="tick-one")
app.add_periodic(tick, every=1, args=("all",), queue="pall", catch_up="all", name="tick-all")


@app.task(store_result=True)
def retry_later(countdown_s: float) -> None:
    """Fails once into a long backoff: its job then waits in the retry set."""
    record(tag="retry_later")
    raise Retry(countdown=countdown_s)


@app.task(store_result=True)
def holds_on(seconds: float) -> str:
    """Catches the cancellation and goes on: only the master's SIGKILL stops it."""
    start = time.time()
    global _client
    if _client is None:
        _client = redis.Redis.from_url(app.settings.redis_url)
    job = current_job()
    _client.rpush("started", job.id if job else "")
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            time.sleep(0.05)
        except taskq.JobCancelled:
            record(tag="holds_on_caught", start=start)
    return "finished"


@app.task(store_result=True, unique=True)
def unique_report(report_id: int, seconds: float = 0.3) -> int:
    """Unique by its arguments: concurrent enqueues of one report run it once."""
    time.sleep(seconds)
    record(tag="unique_report", report_id=report_id)
    return report_id


@app.task
def plain_unique(tag: str) -> None:
    """Keeps no record: used with an explicit unique_key."""
    record(tag=tag)


@app.task(rate_limit="5/s")
def limited(n: int) -> None:
    """At most 5 starts a second across every worker."""
    record(tag="limited", n=n)


@app.task(rate_limit="3/s", store_result=True)
def thirds(n: int) -> int:
    """3 starts a second (a spacing of 333.3 ms), with a status record."""
    record(tag="thirds", n=n)
    return n


@app.task(rate_limit="2/s", limit_key=lambda customer, n: customer)
def per_customer(customer: str, n: int) -> None:
    """2 starts a second per customer."""
    record(tag="per_customer", customer=customer, n=n)


@app.task(concurrency_limit=1)
def exclusive(n: int, seconds: float = 0.2) -> None:
    """One at a time across the fleet; pushes its pid to ``started`` first. Sleeps on its
    first attempt only (a retry after its child was killed is quick)."""
    global _client
    if _client is None:
        _client = redis.Redis.from_url(app.settings.redis_url)
    _client.rpush("started", os.getpid())
    start = time.time()
    job = current_job()
    time.sleep(seconds if job is None or job.attempt == 1 else 0.0)
    record(tag="exclusive", n=n, start=start, end=time.time())


@app.task(concurrency_limit=1, store_result=True)
def exclusive_stored(n: int, seconds: float) -> int:
    """One at a time, with a status record (so a waiting one can be cancelled)."""
    time.sleep(seconds)
    record(tag="exclusive_stored", n=n)
    return n


@app.task(store_result=True)
def reports(n: int) -> int:
    """Live telemetry: ``n`` chunks, progress to ``n``, a log line (docs/telemetry.md)."""
    job = current_job()
    assert job is not None
    for i in range(n):
        job.emit(i)
        job.progress(i + 1, n)
    logging.getLogger(__name__).warning("reported %d", n)
    return n


@app.task(rate_limit="50/s")
def paced(n: int) -> None:
    """50 starts a second (until a limit set at run time says otherwise)."""
    record(tag="paced", n=n)


@app.task(concurrency_limit=5)
def five_at_once(n: int, seconds: float) -> None:
    """Five at a time across the fleet (until a limit set at run time says otherwise); says
    when it has begun in the list ``five:begun``."""
    start = time.time()
    _redis().rpush("five:begun", n)
    time.sleep(seconds)
    record(tag="five", n=n, start=start, end=time.time())


@app.task(
    store_result=True,
    debounce_key=lambda doc, value: f"doc:{doc}",
    debounce_s=0.4,
    debounce_max_wait_s=2.0,
)
def reindex(doc: str, value: int) -> int:
    """Debounced per document by default: a burst of edits runs once, with the last."""
    record(tag="reindex", doc=doc, value=value)
    return value


@app.task(store_result=True)
def recompute(value: int, seconds: float = 0.0) -> int:
    """Records its start and sleeps (a keep_last job that runs while more enqueues come)."""
    record(tag="recompute", value=value)
    time.sleep(seconds)
    return value


@app.task(
    store_result=True,
    batch_size=100,
    batch_wait_s=0.6,
    batch_key=lambda user_id, n: f"user:{user_id}",
)
def digest(calls: list[dict[str, object]]) -> int:
    """Batched per user: records the calls it got (their ``n`` and ids), returns how many."""
    record(tag="digest", ns=[c["args"][1] for c in calls], ids=[c["id"] for c in calls])  # type: ignore[index]
    return len(calls)


@app.task(store_result=True, batch_size=5, batch_wait_s=0.3)
def hard_digest(calls: list[dict[str, object]]) -> int:
    """A batch whose first attempt hangs (its child is killed), second fails, third succeeds."""
    job = current_job()
    attempt = job.attempt if job else 0
    record(tag="hard_digest", ns=[c["args"][0] for c in calls], attempt=attempt)  # type: ignore[index]
    if attempt == 1:
        time.sleep(30)
    if attempt == 2:
        raise ValueError("the batch fails once")
    return len(calls)


@app.task(store_result=True, batch_size=3, batch_wait_s=0.2)
def tally(calls: list[dict[str, object]]) -> int:
    """Batched, and writes nothing but its result: the sum of the calls' first arguments."""
    return sum(c["args"][0] for c in calls)  # type: ignore[index,misc]


@app.task(store_result=True, batch_size=2, batch_wait_s=0.2, concurrency_limit=1)
def exclusive_digest(calls: list[dict[str, object]]) -> int:
    """Batched, and one batch at a time across the fleet: records its calls, start and end."""
    start = time.time()
    time.sleep(0.3)
    record(tag="exclusive_digest", ns=[c["args"][0] for c in calls], start=start, end=time.time())  # type: ignore[index]
    return len(calls)


# -- tasks for fair queues (integration/test_fair.py) -------------------------------------


@app.task(queue="fair", fair_key=lambda tenant, n, seconds=0.0: tenant)
def fair_job(tenant: str, n: int, seconds: float = 0.0) -> None:
    """Pushes ``<tenant>:<n>`` to the list ``fair_starts`` as it starts, then sleeps."""
    _redis().rpush("fair_starts", f"{tenant}:{n}")
    if seconds:
        time.sleep(seconds)
