"""Status records and result encoding, without Redis."""

from __future__ import annotations

import msgpack
import pytest

from taskq import App, ConfigError, ResultTooLarge, UnserializableResult
from taskq.broker.delivery import delivery
from taskq.errors import DecodeError
from taskq.message import Message
from taskq.ops.jobview import render_job
from taskq.results import JobStatus, encode_args, encode_result


def test_message_carries_the_result_ttl() -> None:
    msg = Message("t", (1,), result_ttl_s=60)
    assert Message.decode(msg.encode()).result_ttl_s == 60
    assert Message.decode(Message("t").encode()).result_ttl_s is None
    assert "result_ttl_s" not in msgpack.unpackb(Message("t").encode())


def test_recorded_is_one_word_for_a_job_that_keeps_a_record() -> None:
    # The message, the delivery and the status say it alike; the older names still work.
    assert Message("t", result_ttl_s=60).recorded and not Message("t").recorded
    where = ("q:normal", "q", "normal")
    assert delivery(where, "1-0", {b"body": b"x", b"job": b"j1"}).recorded
    assert not delivery(where, "1-0", {b"body": b"x"}).recorded
    status = JobStatus.from_record("j", _record(state="waiting"), now_ms=0)
    assert status.recorded and status.tracked
    assert status.to_json()["recorded"] and status.to_json()["tracked"]
    unknown = JobStatus.from_record("j", {}, now_ms=0)
    assert not unknown.recorded and not unknown.tracked


@pytest.mark.parametrize("ttl", [0, -5, "60", True, 1.5])
def test_a_bad_result_ttl_in_a_body_is_a_decode_error(ttl: object) -> None:
    body = msgpack.packb({"v": 1, "id": "x", "task": "t", "result_ttl_s": ttl})
    with pytest.raises(DecodeError, match="result_ttl_s"):
        Message.decode(body)


def test_encode_result_names_the_type_and_the_size() -> None:
    assert msgpack.unpackb(encode_result({"a": [1, 2]}, max_bytes=100)) == {"a": [1, 2]}
    with pytest.raises(UnserializableResult, match="object"):
        encode_result(object(), max_bytes=100)
    with pytest.raises(ResultTooLarge, match="over the 10-byte limit"):
        encode_result("x" * 20, max_bytes=10)


def test_task_result_options() -> None:
    app = App("redis://127.0.0.1:1/0", store_results=True, result_ttl_s=50)
    on = app.task(name="on")(lambda: None)
    off = app.task(name="off", store_result=False)(lambda: None)
    ttl = app.task(name="ttl", result_ttl_s=7)(lambda: None)
    assert on.message((), {}).result_ttl_s == 50
    assert off.message((), {}).result_ttl_s is None
    assert ttl.message((), {}).result_ttl_s == 7
    plain = App("redis://127.0.0.1:1/0")
    assert plain.task(name="x")(lambda: None).message((), {}).result_ttl_s is None
    with pytest.raises(ConfigError, match="result_ttl_s"):
        app.task(name="bad", result_ttl_s=0)(lambda: None)
    with pytest.raises(ConfigError, match="result_ttl_s must be > 0"):
        App("redis://127.0.0.1:1/0", result_ttl_s=0)


def _record(**fields: object) -> dict[bytes, bytes]:
    return {k.encode(): v if isinstance(v, bytes) else str(v).encode() for k, v in fields.items()}


def test_status_from_a_record() -> None:
    attempt = msgpack.packb(
        {"error_type": "E", "error": "bad", "traceback": "tb", "worker": "w", "finished_ms": 5}
    )
    raw = _record(
        state="succeeded",
        task="t",
        queue="q",
        priority="high",
        args=encode_args((1,), {"k": 2}),
        attempts=2,
        enqueued_ms=1,
        started_ms=2,
        finished_ms=3,
        worker="w:1",
        result=msgpack.packb([1, "a"]),
        **{"attempt:1": attempt},
    )
    s = JobStatus.from_record("j", raw, now_ms=10)
    assert (s.state, s.task, s.queue, s.priority, s.attempts) == ("succeeded", "t", "q", "high", 2)
    assert (s.args, s.kwargs, s.value, s.worker) == ((1,), {"k": 2}, [1, "a"], None)
    assert s.last_error is not None and (s.last_error.attempt, s.last_error.error) == (1, "bad")
    assert s.to_json()["result"] == [1, "a"]
    text = "\n".join(render_job(s, 10))
    assert "succeeded" in text and "attempt 1 failed" in text and "result    [1, 'a']" in text


def test_status_running_counts_the_run_in_progress_and_due_retries_are_waiting() -> None:
    running = JobStatus.from_record("j", _record(state="running", worker="w", attempts=1), 0)
    assert (running.attempts, running.worker) == (2, "w")
    due = JobStatus.from_record("j", _record(state="retrying", due_ms=5), now_ms=6)
    assert due.state == "waiting" and due.due_ms is None
    later = JobStatus.from_record("j", _record(state="retrying", due_ms=5), now_ms=4)
    assert later.state == "retrying" and later.due_ms == 5
    assert JobStatus.from_record("j", {}, 0).state == "unknown"


def test_a_garbled_record_field_is_skipped_not_fatal() -> None:
    raw = _record(state="failed", args=b"\xc1", **{"attempt:1": b"\xc1", "attempt:x": b""})
    s = JobStatus.from_record("j", raw, 0)
    assert (s.state, s.args, s.kwargs, s.errors) == ("failed", (), None, ())
