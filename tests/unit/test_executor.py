"""Executor: delivery in, outcome out, with no Redis involved."""

from __future__ import annotations

import msgpack
import pytest

from taskq import App, JobCancelled, Retry, current_job
from taskq.broker import Delivery
from taskq.broker.delivery import delivery as entry_delivery
from taskq.message import Message, now_ms
from taskq.worker.executor import DECODE_AHEAD_BYTES, Executor, Prepared
from taskq.worker.outcome import CANCELLED, DEAD, EXPIRED, OK, RETRY, Outcome

app = App("redis://127.0.0.1:1/0", queue="unit", retry_backoff_ms=1000, retry_jitter=False)
seen: list[object] = []


@app.task
def add(a: int, b: int) -> int:
    job = current_job()
    seen.append(job.attempt if job else None)
    return a + b


@app.task
def boom() -> None:
    raise RuntimeError("boom")


@app.task
def later() -> None:
    raise Retry(countdown=7)


@app.task
def inner_type_error() -> None:
    raise TypeError("raised by the task itself")


@app.task(dont_autoretry_for=(KeyError,))
def fatal() -> None:
    raise KeyError("gone")


def delivery(msg: Message | bytes | None, deliveries: int = 1) -> Delivery:
    """The delivery of an entry whose ``body`` field is ``msg`` (None: it has none)."""
    body = msg.encode() if isinstance(msg, Message) else msg
    fields = {} if body is None else {b"body": body}
    fresh = entry_delivery(("unit:normal", "unit", "normal"), "1-0", fields)
    return fresh._replace(deliveries=deliveries)


def run(msg: Message | bytes | None, deliveries: int = 1) -> Outcome:
    ex = Executor(app)
    prepared = ex.prepare(delivery(msg, deliveries))
    return prepared if isinstance(prepared, Outcome) else ex.execute(prepared)


def test_ok_sets_the_job_context() -> None:
    seen.clear()
    outcome = run(Message(add.name, (1, 2)), deliveries=2)
    assert outcome.kind == OK
    assert seen == [2]
    assert current_job() is None


def test_failure_is_retried_with_backoff_until_the_last_attempt() -> None:
    first = run(Message(boom.name))
    assert (first.kind, first.delay_ms, first.error_type) == (RETRY, 1000, "RuntimeError")
    assert "boom" in first.traceback
    assert run(Message(boom.name), deliveries=2).delay_ms == 4000
    last = run(Message(boom.name), deliveries=3)
    assert (last.kind, last.attempt) == (DEAD, 3)


def test_retries_carried_in_the_body_count_as_attempts() -> None:
    assert run(Message(boom.name, retries=2)).kind == DEAD


def test_explicit_retry_uses_its_countdown() -> None:
    outcome = run(Message(later.name))
    assert (outcome.kind, outcome.delay_ms) == (RETRY, 7000)


def test_dont_autoretry_for_dead_letters_at_once() -> None:
    assert run(Message(fatal.name)).kind == DEAD


def test_arguments_that_do_not_fit_the_signature_are_dead_lettered() -> None:
    outcome = run(Message(add.name, (1,)))
    assert outcome.kind == DEAD
    assert "missing" in outcome.error


def test_type_error_inside_a_task_is_an_ordinary_failure() -> None:
    assert run(Message(inner_type_error.name)).kind == RETRY


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        (None, "malformed entry: entry has no 'body' field"),
        (b"\xc1garbage", "malformed job"),
        (msgpack.packb({"v": 9, "id": "a", "task": "t"}), "newer than this worker"),
        (Message("nope.missing").encode(), "no task named 'nope.missing'"),
    ],
)
def test_bad_input_is_dead_lettered_with_a_reason(body: bytes | None, reason: str) -> None:
    outcome = run(body)
    assert outcome.kind == DEAD
    assert reason in outcome.error


@pytest.mark.parametrize(
    ("fields", "reason"),
    [
        ({b"body": b"x", b"ff": b"soon"}, "entry field 'ff' is not a time in ms: b'soon'"),
        ({b"body": b"x", b"job": b"\xff\xfe"}, "entry field 'job' is not a job id: b'\\xff\\xfe'"),
        ({b"body": 7}, "entry field 'body' is not a string"),
    ],
)
def test_a_malformed_entry_is_dead_lettered_with_its_reason(
    fields: dict[bytes, object], reason: str
) -> None:
    d = entry_delivery(("unit:normal", "unit", "normal"), "1-0", fields)
    outcome = Executor(app).prepare(d)
    assert isinstance(outcome, Outcome) and outcome.kind == DEAD
    assert (outcome.error_type, outcome.error) == ("Rejected", f"malformed entry: {reason}")


def test_a_non_ascii_mac_is_a_refusal_not_a_crash() -> None:
    signed = App("redis://127.0.0.1:1/0", queue="unit", signing_keys=["k-0123456789abcdef"])
    signed.task(name=add.name)(add.fn)
    head = Message(add.name, (1, 2)).encode()
    body = head + msgpack.packb([signed.settings.signer.key_ids[0], "é" * 64])  # type: ignore[union-attr]
    outcome = Executor(signed).prepare(delivery(body))
    assert isinstance(outcome, Outcome) and outcome.kind == DEAD
    assert outcome.error == "refused: malformed signature trailer"


def test_any_error_while_decoding_dead_letters_the_job_and_is_logged(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def broken(body: bytes, signer: object = None) -> Message:
        raise LookupError("a bug in the decoder")

    monkeypatch.setattr(Message, "decode", broken)
    outcome = Executor(app).prepare(delivery(b"anything"))
    assert isinstance(outcome, Outcome) and outcome.kind == DEAD
    assert outcome.error == "malformed job: LookupError: a bug in the decoder"
    [logged] = [r for r in caplog.records if "decoding failed" in r.getMessage()]
    assert logged.exc_info is not None and logged.exc_info[0] is LookupError


def test_a_job_lost_more_often_than_allowed_is_dead_lettered_without_running() -> None:
    seen.clear()
    outcome = run(Message(add.name, (1, 2)), deliveries=4)
    assert (outcome.kind, outcome.error_type, outcome.attempt) == (DEAD, "WorkerLost", 3)
    assert seen == []


def test_prepared_carries_task_time_limits() -> None:
    ex = Executor(app, time_limit_s=9.0)
    prepared = ex.prepare(delivery(Message(add.name, (1, 2))))
    assert isinstance(prepared, Prepared)
    assert (prepared.hard_limit_s, prepared.soft_limit_s) == (9.0, None)


@app.task(bind=True)
def bound(self: object, x: int) -> int:
    job = current_job()
    seen.append((self is bound, job.attempt if job else None))
    return x


def test_bound_task_runs_from_a_delivery_and_its_signature_is_checked() -> None:
    seen.clear()
    assert run(Message(bound.name, (1,)), deliveries=2).kind == OK
    assert seen == [(True, 2)]
    wrong = run(Message(bound.name, (1, 2)))
    assert wrong.kind == DEAD and wrong.error_type == "TypeError"


def test_direct_call_runs_inline_as_a_job_of_its_own() -> None:
    seen.clear()
    assert bound(5) == 5
    assert seen == [(True, 1)]
    assert current_job() is None


def test_a_fresh_entry_whose_body_uses_up_the_retries_is_rejected_not_lost() -> None:
    outcome = run(Message(add.name, (1, 2), retries=5))
    assert (outcome.kind, outcome.error_type) == (DEAD, "Rejected")
    assert "use up max_retries" in outcome.error
    lost = run(Message(add.name, (1, 2), retries=1), deliveries=3)
    assert (lost.kind, lost.error_type) == (DEAD, "WorkerLost")


class Unprintable(Exception):
    def __str__(self) -> str:
        raise RuntimeError("no")


@app.task
def raises_unprintable() -> None:
    raise Unprintable()


@app.task
def raises_huge() -> None:
    raise ValueError("x" * 100_000)


def test_error_text_is_always_storable_and_bounded() -> None:
    odd = run(Message(raises_unprintable.name))
    assert odd.kind == RETRY and "str() of the exception failed" in odd.error
    huge = run(Message(raises_huge.name))
    assert len(huge.error) < 5_000 and huge.error.endswith("more characters)")
    assert len(huge.traceback) < 70_000 and huge.traceback.rstrip().endswith("x")


def test_a_batch_is_decoded_ahead_up_to_a_byte_budget() -> None:
    ex = Executor(app)
    small = [delivery(Message(add.name, (i, i))) for i in range(3)]
    big = delivery(Message(add.name, ("x" * DECODE_AHEAD_BYTES, 0)))
    batch = [*small, big, *small]
    ahead = ex.prepare_ahead(batch)
    assert len(ahead) == len(batch)
    assert all(isinstance(p, Prepared) for p in ahead[:3])
    assert ahead[3:] == [None] * 4  # decoded at their turn: a large body stops the run
    undecodable = delivery(b"\xc1")
    [rejected] = ex.prepare_ahead([undecodable])
    assert isinstance(rejected, Outcome) and rejected.kind == DEAD


def test_a_job_decoded_ahead_that_expired_since_is_not_run() -> None:
    ex = Executor(app)
    prepared = ex.prepare(delivery(Message(add.name, (1, 1), expires_ms=now_ms() + 60_000)))
    assert isinstance(prepared, Prepared)
    assert ex.still_current(prepared) is prepared
    stale = prepared._replace(msg=prepared.msg._replace(expires_ms=now_ms() - 1))
    outcome = ex.still_current(stale)
    assert isinstance(outcome, Outcome) and outcome.kind == EXPIRED


@app.task
def waits_on_a_cancelled_job() -> None:
    raise JobCancelled("0" * 32)  # what result() of another, cancelled job raises


@app.task
def cancelled_itself() -> None:
    job = current_job()
    assert job is not None
    raise JobCancelled(job.id, "cancelled while running")  # as the cancel signal raises it


def test_job_cancelled_of_another_job_is_an_ordinary_failure() -> None:
    outcome = run(Message(waits_on_a_cancelled_job.name, ()))
    assert (outcome.kind, outcome.error_type) == (RETRY, "JobCancelled")


def test_job_cancelled_of_this_job_cancels_it() -> None:
    outcome = run(Message(cancelled_itself.name, ()))
    assert outcome.kind == CANCELLED
