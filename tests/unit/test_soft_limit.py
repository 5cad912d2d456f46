"""The soft time limit raises only inside the task's own code."""

from __future__ import annotations

import signal
import sys
import time

import pytest

from taskq import App, SoftTimeLimitExceeded
from taskq.broker import Delivery
from taskq.message import Message
from taskq.worker.consumer import Consumer, ConsumerOptions
from taskq.worker.executor import Executor
from taskq.worker.outcome import OK, Outcome

app = App("redis://127.0.0.1:1/0", queue="unit")


@app.task(soft_time_limit_s=0.05)
def naps(seconds: float) -> str:
    time.sleep(seconds)
    return "woke"


def consumer() -> Consumer:
    return Consumer(
        None,  # type: ignore[arg-type]  # no Redis: only the run step is used
        Executor(app),
        name="unit",
        options=ConsumerOptions(soft_time_limits=True),
    )


def prepared(seconds: float) -> object:
    msg = Message(naps.name, (seconds,), queue="unit")
    return Executor(app).prepare(Delivery("unit:normal", "unit", "normal", "1-0", 1, msg.encode()))


@pytest.fixture(autouse=True)
def _alarm_handler() -> object:
    saved = signal.getsignal(signal.SIGALRM)
    yield
    signal.setitimer(signal.ITIMER_REAL, 0)
    signal.signal(signal.SIGALRM, saved)


def test_a_task_past_its_soft_limit_gets_the_exception() -> None:
    c = consumer()
    signal.signal(signal.SIGALRM, c._on_soft_limit)
    outcome = c._run(prepared(5.0))  # type: ignore[arg-type]
    assert isinstance(outcome, Outcome) and outcome.error_type == "SoftTimeLimitExceeded"
    assert outcome.duration_s < 2.0


def test_a_timer_that_fires_after_the_task_returned_is_ignored() -> None:
    """Once, a late SIGUSR1 after ``task.run`` returned escaped the try and
    turned a success into a crash. Now the handler looks for the task's frame."""
    c = consumer()
    p = prepared(0.0)
    c._task_code = naps.fn.__code__  # as during the run; the handler sees no task frame
    c._on_soft_limit(signal.SIGALRM, sys._getframe())  # must not raise
    assert c._run(p).kind == OK  # type: ignore[arg-type]


def test_inside_the_task_the_handler_raises() -> None:
    c = consumer()
    c._task_code = sys._getframe().f_code  # pretend this test function is the task
    with pytest.raises(SoftTimeLimitExceeded):
        c._on_soft_limit(signal.SIGALRM, sys._getframe())
