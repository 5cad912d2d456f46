"""Live job telemetry (docs/telemetry.md): progress, the output stream and per-job logs,
written by real worker processes into a real Redis and read by job handles and the CLI."""

from __future__ import annotations

import asyncio
import json
import math
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator

import pytest
import redis
from click.testing import CliRunner

from taskq import App, ResultTimeout
from taskq.cli import main
from taskq.context import JobContext
from taskq.keys import QueueKeys
from taskq.telemetry import Chunk
from taskq.testing import drain
from taskq.worker.telemetry import Telemetry
from tests import telemetry_tasks as tt
from tests.conftest import WorkerProcess, wait_until
from tests.redis_server import RedisServer

pytestmark = pytest.mark.integration

StartWorker = Callable[..., WorkerProcess]
APP = "tests.telemetry_tasks"


@pytest.fixture
def tapp(redis_url: str) -> Iterator[App]:
    """``tests.telemetry_tasks.app`` pointed at this test's Redis."""
    tt.app.settings = tt.app.settings.replace(redis_url=redis_url, block_ms=200)
    yield tt.app
    tt.app.close()


def _keys(job_id: str) -> list[str]:
    k = QueueKeys("tasks")
    return [k.progress(job_id), k.output(job_id), k.logs(job_id), k.logsize(job_id)]


@pytest.mark.slow
def test_a_late_reader_gets_every_chunk_in_order_and_a_cut_reader_resumes(
    start_worker: StartWorker, tapp: App, r: redis.Redis
) -> None:
    # Given: a worker, and a job that emits 1,000 chunks 1 ms apart (progress 0 -> 1,000).
    start_worker("-A", APP, "-c", "1")
    job = tt.chatter.delay(1000, 1.0)
    wait_until(lambda: job.progress() is not None, timeout_s=20, message="the first progress")
    # When: a reader starts 100 ms late, and another stops after 500 chunks...
    time.sleep(0.1)
    late: list[Chunk] = []
    reader = threading.Thread(target=lambda: late.extend(job.stream(timeout=30)))
    reader.start()
    first = []
    for chunk in job.stream(timeout=30):
        first.append(chunk)
        if len(first) == 500:
            break
    # ... and resumes after the last id it saw.
    rest = list(job.stream(after=first[-1].id, timeout=30))
    reader.join(30)
    # Then: the late reader got all 1,000 in order; the resumed one exactly 501-1,000.
    assert [c.value for c in late] == list(range(1000))
    assert [c.value for c in rest] == list(range(500, 1000))
    assert {c.attempt for c in late} == {1}
    assert job.result(timeout=10) == 1000
    p = job.progress()
    assert p is not None and (p.done, p.total, p.message) == (1000, 1000, "chunk 999")


def test_progress_is_readable_within_250_ms_and_shown_by_job_json(
    start_worker: StartWorker, tapp: App, r: redis.Redis, redis_url: str
) -> None:
    start_worker("-A", APP, "-c", "1")
    job = tt.steady_progress.delay(1.5)
    wait_until(lambda: job.progress() is not None, timeout_s=20, message="the first progress")
    lags_ms = []
    for _ in range(10):
        p = job.progress()
        assert p is not None and p.message == "counting"
        lags_ms.append(time.time() * 1000 - p.updated_ms)
        time.sleep(0.05)
    # The newest call is always under a millisecond old: what is read is at most 250 ms old.
    assert max(lags_ms) < 250, lags_ms
    out = CliRunner().invoke(main, ["job", job.id, "--json"], env={"TASKQ_REDIS_URL": redis_url})
    assert out.exit_code == 0, out.output
    shown = json.loads(out.output)
    assert shown["progress"]["message"] == "counting" and shown["progress"]["done"] >= 1
    job.result(timeout=20)


def test_a_tight_progress_loop_writes_at_most_once_per_100_ms(tapp: App, r: redis.Redis) -> None:
    # Given: a writer, and a job context that uses it.
    sink = Telemetry(lambda: tapp.link, tapp.settings)
    job = JobContext("j1", "t", 1, 3, "tasks", "normal", 0, None, sink=sink)
    # When: progress is called 100,000 times in a tight loop, then the run ends.
    started = time.monotonic()
    for i in range(100_000):
        job.progress(i + 1, 100_000)
    elapsed_s = time.monotonic() - started
    sink.end(job, "ok")
    # Then: at most one write per 100 ms (plus the first and the final), and the last wins.
    assert sink.round_trips <= math.ceil(elapsed_s / 0.1) + 2, (sink.round_trips, elapsed_s)
    assert r.hget(_keys("j1")[0], "done") == b"100000"
    assert r.xrange(_keys("j1")[1])[-1][1][b"end"] == b"succeeded"


@pytest.mark.slow
def test_a_sigkilled_run_leaves_its_chunks_and_the_retry_appends_after_them(
    start_worker: StartWorker, tapp: App, r: redis.Redis
) -> None:
    # Given: a job whose first attempt emits 20 chunks and hangs; a reader waits on it.
    w = start_worker("-A", APP, "-c", "1")
    job = tt.crashes_once.delay(20)
    got: list[Chunk] = []
    reader = threading.Thread(target=lambda: got.extend(job.stream(timeout=60)))
    reader.start()
    wait_until(lambda: r.llen("emitted") == 1, timeout_s=20, message="attempt 1's chunks")
    # When: its child is SIGKILLed (the master respawns it and the sweep retries the job).
    with open(f"/proc/{w.pid}/task/{w.pid}/children") as f:
        child = int(f.read().split()[0])
    os.kill(child, signal.SIGKILL)
    # Then: the reader kept waiting and got both attempts' chunks, in order, each marked.
    reader.join(60)
    assert [c.value for c in got] == [f"1:{i}" for i in range(20)] + [f"2:{i}" for i in range(20)]
    assert [c.attempt for c in got] == [1] * 20 + [2] * 20
    assert job.result(timeout=10) == 20


def test_a_chunk_over_the_cap_fails_the_call_cleanly(tapp: App, r: redis.Redis) -> None:
    tapp.settings = tapp.settings.replace(output_max_chunk_bytes=1000)
    job = tt.too_big.delay(2000)
    drain(tapp)
    assert "over the 1000-byte limit" in job.result(timeout=5)
    assert [c.value for c in job.stream(timeout=5)] == ["refused"]


def test_logs_are_kept_up_to_the_byte_cap_and_keys_expire_after_the_result_ttl(
    tapp: App, r: redis.Redis
) -> None:
    tapp.settings = tapp.settings.replace(log_max_bytes=2000, result_ttl_s=3)
    job = tt.talkative.delay(100)
    drain(tapp)
    logs = job.logs()
    assert logs.dropped > 0
    assert logs.records[-1].message.startswith("with a traceback")
    assert "ValueError: boom" in logs.records[-1].message
    assert logs.records[-1].level == "ERROR" and logs.records[-1].attempt == 1
    assert sum(len(x) for x in r.lrange(_keys(job.id)[2], 0, -1)) <= 2000
    ttls = [r.pttl(k) for k in _keys(job.id) if r.exists(k)]
    assert ttls and all(0 < t <= 3000 for t in ttls)
    wait_until(lambda: not any(r.exists(k) for k in _keys(job.id)), timeout_s=6, message="expiry")


def test_a_job_without_telemetry_writes_nothing_and_its_stream_ends(
    tapp: App, r: redis.Redis
) -> None:
    job = tt.silent.delay()
    drain(tapp)
    assert not any(r.exists(k) for k in _keys(job.id))
    assert list(job.stream(timeout=5)) == []
    assert job.progress() is None and job.logs() == ((), 0)


def test_a_job_that_stores_no_result_streams_to_its_end_entry(tapp: App, r: redis.Redis) -> None:
    job = tt.chatter_unrecorded.delay(5)
    drain(tapp)
    assert not job.stores_result
    assert [c.value for c in job.stream(timeout=5)] == [{"i": i} for i in range(5)]
    p = job.progress()
    assert p is not None and (p.done, p.total) == (5, 5)


def test_a_reader_times_out_on_a_job_that_has_not_ended(tapp: App, r: redis.Redis) -> None:
    job = tt.chatter.delay(3)
    with pytest.raises(ResultTimeout):
        list(job.stream(timeout=0.3))


def test_an_async_reader_leaves_the_event_loop_responsive(
    start_worker: StartWorker, tapp: App, r: redis.Redis
) -> None:
    start_worker("-A", APP, "-c", "1")
    job = tt.achatter.delay(300)

    async def main() -> tuple[list[Chunk], float]:
        late_ms = 0.0
        stop = asyncio.Event()

        async def ticker() -> None:
            nonlocal late_ms
            while not stop.is_set():
                t = time.monotonic()
                await asyncio.sleep(0.01)
                late_ms = max(late_ms, (time.monotonic() - t - 0.01) * 1000)

        tick = asyncio.create_task(ticker())
        got = [c async for c in job.astream(timeout=30)]
        stop.set()
        await tick
        await tapp.aclose()
        return got, late_ms

    got, late_ms = asyncio.run(main())
    assert [c.value for c in got] == [f"token {i}" for i in range(300)]
    assert late_ms < 50, late_ms


def test_job_follow_prints_progress_chunks_logs_and_the_outcome(
    start_worker: StartWorker, tapp: App, r: redis.Redis, redis_url: str
) -> None:
    start_worker("-A", APP, "-c", "1")
    job = tt.chatter.delay(30, 5.0)
    out = CliRunner().invoke(main, ["job", job.id, "--follow"], env={"TASKQ_REDIS_URL": redis_url})
    assert out.exit_code == 0, out.output
    lines = out.output.splitlines()
    assert [x for x in lines if x.startswith("[1] ")] == [f"[1] {i}" for i in range(30)]
    assert "progress 30/30 (100%) chunk 29" in lines
    assert lines.index("ended: succeeded") < lines.index(f"job {job.id}: succeeded")


def test_the_docs_example_runs_as_shown(
    redis_url: str,
    r: redis.Redis,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    import re
    from pathlib import Path

    page = (Path(__file__).parents[2] / "docs" / "telemetry.md").read_text()
    block = re.search(r"```python\n(.*?)```", page, re.S)
    assert block is not None
    monkeypatch.setenv("TASKQ_REDIS_URL", redis_url)
    namespace: dict[str, object] = {"__name__": "docs_telemetry"}
    exec(compile(block.group(1), "docs/telemetry.md", "exec"), namespace)
    namespace["app"].close()  # type: ignore[attr-defined]
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("Progress(done=3, total=3, message='rendering', updated_ms=")
    assert out[1:] == ["['row 0', 'row 1', 'row 2']", "['report of 3 rows done']"]


def test_telemetry_survives_a_redis_restart_with_aof(aof_server: RedisServer) -> None:
    # Given: a job's progress, chunks and logs written to a server persisting to an AOF.
    app = App(aof_server.url, store_results=True)
    try:
        task = app.task(tt.chatter.fn, name="tests.telemetry_tasks.chatter_aof")
        job = task.delay(5, 0.0)
        drain(app)
        assert [c.value for c in job.stream(timeout=5)] == list(range(5))
        # When: Redis stops (the AOF fsynced) and starts again on the same data.
        aof_server.stop()
        aof_server.start()
        # Then: everything is read back as it was.
        assert [c.value for c in job.stream(timeout=5)] == list(range(5))
        p = job.progress()
        assert p is not None and (p.done, p.total) == (5, 5)
    finally:
        app.close()


def test_signed_jobs_report_and_what_is_read_back_is_checked(tapp: App, r: redis.Redis) -> None:
    # Given: signing on (bodies are signed; telemetry is not a body), a job that reports.
    tapp.settings = tapp.settings.replace(signing_keys=("k1",))
    job = tt.chatter_unrecorded.delay(2)
    drain(tapp)
    assert [c.value for c in job.stream(timeout=5)] == [{"i": 0}, {"i": 1}]
    # When: someone with write access puts garbage in its keys.
    progress, output, logs, logsize = _keys(job.id)
    r.delete(output)
    r.xadd(output, {"a": "x", "c": b"\xc1 not msgpack"})
    r.xadd(output, {"end": "succeeded"})
    r.hset(progress, mapping={"done": "nan", "updated_ms": "soon"})
    r.rpush(logs, b"\xc1", b"\x93\x01\x02\x03")
    r.hset(logsize, "dropped", "-5")
    # Then: the readers give what they can and never raise.
    chunks = list(job.stream(timeout=5))
    assert [(c.attempt, c.value) for c in chunks] == [(0, b"\xc1 not msgpack")]
    assert job.progress() is None
    assert job.logs() == ((), 0)
