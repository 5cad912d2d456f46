"""Workflows as values: signatures, chain, group and chord (Celery's canvas), and how one is
laid out as the fragments its jobs carry.

A signature names a task call to make later: ``add.s(2, 3)``; ``add.si(2, 3)`` ignores the
previous step's result. Workflows compose them: ``a.s(1) | b.s() | c.s()`` (a chain: each
step gets the previous result as its first argument), ``group(add.s(i, i) for i in
range(10))`` (in parallel; the result is the list, in order), ``chord(header_group, body)``
or ``group | body`` (the body runs once, with the header's results in order, after every
header job succeeded). A group followed by another step inside a chain is a chord.

Nothing here talks to Redis: :meth:`Signature.apply_async` and friends lay the workflow out
as job fragments (:mod:`taskq.flow`) and hand them to the app.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Union

from taskq.current import current_producer
from taskq.errors import ConfigError
from taskq.keys import check_priority

if TYPE_CHECKING:
    from taskq.job import Flow
    from taskq.protocols import Producer, TaskLike

Workflow = Union["Signature", "Chain", "Group", "Chord"]
"""Anything that can be applied."""


@dataclass(frozen=True)
class Signature:
    """A task call to make later: its arguments and options (a plain value).

    Attributes:
        immutable: ignore the previous step's result (``task.si``).
        countdown_s: start this long after the step is due.
        link: workflows started with this step's result when it succeeds.
        link_error: signatures started when it fails for good, with the failed job's id
            as their first argument (unless immutable).
    """

    task: str
    args: tuple[Any, ...] = ()
    kwargs: Mapping[str, Any] = field(default_factory=dict)
    immutable: bool = False
    queue: str | None = None
    priority: str | None = None
    countdown_s: float | None = None
    link: tuple[Workflow, ...] = ()
    link_error: tuple[Signature, ...] = ()
    task_obj: TaskLike | None = field(default=None, repr=False, compare=False)

    def set(
        self,
        *,
        priority: str | None = None,
        queue: str | None = None,
        countdown: float | None = None,
        immutable: bool | None = None,
    ) -> Signature:
        """A copy with options changed."""
        if priority is not None:
            check_priority(priority)
        if countdown is not None and (isinstance(countdown, bool) or countdown < 0):
            raise ConfigError(f"countdown must be a number of seconds >= 0, not {countdown!r}")
        return dataclasses.replace(
            self,
            priority=priority or self.priority,
            queue=queue or self.queue,
            countdown_s=self.countdown_s if countdown is None else float(countdown),
            immutable=self.immutable if immutable is None else immutable,
        )

    def on_success(self, *workflows: Workflow) -> Signature:
        """A copy that also starts ``workflows`` with its result (Celery's ``link``)."""
        return dataclasses.replace(self, link=(*self.link, *workflows))

    def on_error(self, *callbacks: Signature) -> Signature:
        """A copy that also starts ``callbacks`` if it fails for good (``link_error``)."""
        return dataclasses.replace(self, link_error=(*self.link_error, *callbacks))

    def __or__(self, other: Workflow) -> Chain:
        return chain(self, other)

    def apply_async(self, *, app: Producer | None = None) -> Flow:
        """Start it; returns the handle."""
        return _apply(self, app)

    def delay(self) -> Flow:
        return self.apply_async()


@dataclass(frozen=True)
class Chain:
    """Steps run one after the other, each given the previous one's result."""

    steps: tuple[Workflow, ...]
    link_error: tuple[Signature, ...] = ()

    def __or__(self, other: Workflow) -> Chain:
        return chain(self, other)

    def on_error(self, *callbacks: Signature) -> Chain:
        """Start ``callbacks`` if any step fails for good."""
        return dataclasses.replace(self, link_error=(*self.link_error, *callbacks))

    def apply_async(self, *, app: Producer | None = None) -> Flow:
        return _apply(self, app)

    def delay(self) -> Flow:
        return self.apply_async()


@dataclass(frozen=True)
class Group:
    """Members run in parallel; the result is the list of theirs, in order."""

    members: tuple[Signature | Chain, ...]

    def __or__(self, body: Workflow) -> Chord:
        return chord(self, body)

    def apply_async(self, *, app: Producer | None = None) -> Flow:
        return _apply(self, app)

    def delay(self) -> Flow:
        return self.apply_async()


@dataclass(frozen=True)
class Chord:
    """A group (the header) whose body runs once, with the header's results, after every
    header job succeeded; a header job that fails for good fails the chord."""

    header: Group
    body: Signature | Chain
    link_error: tuple[Signature, ...] = ()

    def __or__(self, other: Workflow) -> Chain:
        return chain(self, other)

    def on_error(self, *callbacks: Signature) -> Chord:
        """Start ``callbacks`` once if the chord fails."""
        return dataclasses.replace(self, link_error=(*self.link_error, *callbacks))

    def apply_async(self, *, app: Producer | None = None) -> Flow:
        return _apply(self, app)

    def delay(self) -> Flow:
        return self.apply_async()


def chain(*steps: Workflow | Iterable[Workflow]) -> Chain:
    """``chain(a.s(), b.s(), c.s())`` (or one iterable of steps); nested chains flatten."""
    flat: list[Workflow] = []
    for step in _items(steps):
        flat += step.steps if isinstance(step, Chain) and not step.link_error else [step]
    if not flat:
        raise ConfigError("a chain needs at least one step")
    return Chain(tuple(flat))


def group(*members: Signature | Chain | Iterable[Signature | Chain]) -> Group:
    """``group(add.s(1, 1), add.s(2, 2))`` or ``group(add.s(i, i) for i in range(n))``."""
    items = _items(members)
    for m in items:
        if not isinstance(m, Signature | Chain):
            raise ConfigError(
                f"a group's members are signatures or chains, not {type(m).__name__} "
                "(nested groups and chords in a group are not supported)"
            )
    if not items:
        raise ConfigError("a group needs at least one member")
    return Group(tuple(items))


def chord(header: Group | Iterable[Signature | Chain], body: Workflow) -> Chord:
    """``chord(group(...), body)``: the body gets the list of the header's results."""
    head = header if isinstance(header, Group) else group(*header)
    if isinstance(body, Signature | Chain):
        return Chord(head, body)
    raise ConfigError(f"a chord's body is a signature or a chain, not {type(body).__name__}")


def _items(values: tuple[Any, ...]) -> list[Any]:
    """Arguments given one by one, or as a single iterable (a generator, a list)."""
    if len(values) == 1 and not isinstance(values[0], Signature | Chain | Group | Chord):
        return list(values[0])
    return list(values)


def _apply(workflow: Workflow, app: Producer | None) -> Flow:
    return (app or app_of(workflow)).launch(workflow)


def app_of(w: Workflow) -> Producer:
    """The app of the workflow's first task (the current app for shared tasks)."""
    if isinstance(w, Signature) and w.task_obj is not None:
        return w.task_obj.app
    if isinstance(w, Chain):
        return app_of(w.steps[0])
    if isinstance(w, Group):
        return app_of(w.members[0])
    if isinstance(w, Chord):
        return app_of(w.header)
    return current_producer()
