"""A user's module, checked with mypy by tests/unit/test_typing.py: each line marked
``# error: <code>`` must be reported with that code, and no other line may be."""

from __future__ import annotations

import taskq
from taskq import App, Settings, Task

app = App("redis://localhost:6379/0", queue="mail", max_retries=5)
configured = App(settings=Settings(queue="reports"), visibility_timeout_ms=60_000)
wrong_setting = App(max_retries="5")  # error: arg-type


@app.task
def add(a: int, b: int) -> int:
    return a + b


@app.task(priority="high", max_retries=3, time_limit_s=30.0)
def greet(name: str, *, loud: bool = False) -> str:
    return name.upper() if loud else name


@app.task(bind=True)
def bound(self: Task[[int], None], n: int) -> None:
    print(self.name, n)
    request = self.request
    if request is not None:
        request.progress(1, n, "started")
        request.emit({"n": n})
        request.progress("one")  # error: arg-type


@taskq.task
def shared(x: float) -> float:
    return x * 2


add.delay(1, 2)
add.delay("x", 2)  # error: arg-type
add.delay(1)  # error: call-arg
greet.delay("ada", loud=True)
greet.delay("ada", shout=True)  # error: call-arg
bound.delay(3)
bound.delay("three")  # error: arg-type
shared.delay(1.5)
shared.delay("1.5")  # error: arg-type
total: int = add(1, 2)
text: int = greet("ada")  # error: assignment


@app.task(time_limit_sec=3)  # error: call-overload
def misspelt() -> None: ...


# A handle from an id, reached through a task's app.
handle = add.app.job("0123456789abcdef0123456789abcdef")
handle.result(timeout=1)
add.app.job(7)  # error: arg-type

# Live telemetry, read by id.
progress = handle.progress()
if progress is not None:
    share: float = progress.done / (progress.total or 1)
for chunk in handle.stream(timeout=5):
    print(chunk.id, chunk.attempt, chunk.value)
kept: int = len(handle.logs().records)
