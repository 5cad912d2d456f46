"""A workflow laid out as fragments (see :mod:`taskq.flow` for what a fragment says and how it
turns into writes). The producer's side of workflows: a worker loads it only when a job of its
launches one, so that its start does not define the workflow types."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple

from taskq.canvas import Chain, Chord, Group, Signature, Workflow
from taskq.errors import ConfigError
from taskq.job import Job
from taskq.keys import QueueKeys
from taskq.message import new_job_id
from taskq.middleware import enqueue_through, overriding

if TYPE_CHECKING:
    from taskq.protocols import Producer


@dataclass
class Context:
    """What follows the part being laid out."""

    next: list[dict[str, Any]] = field(default_factory=list)
    fail: list[list[Any]] = field(default_factory=list)
    chord: list[Any] | None = None
    abort: list[dict[str, Any]] = field(default_factory=list)
    errback: list[dict[str, Any]] = field(default_factory=list)


class Laid(NamedTuple):
    fragments: list[dict[str, Any]]
    """What starts the part."""
    terminal: list[Job]
    """The jobs whose results are the part's result."""
    steps: list[dict[str, Any]]
    """Every job fragment, for the status records created up front."""


class Layout:
    """Lays a workflow out for one app (its task options and settings)."""

    def __init__(self, app: Producer) -> None:
        self.app = app

    def lay(self, w: Workflow, ctx: Context) -> Laid:
        if isinstance(w, Signature):
            return self._signature(w, ctx)
        if isinstance(w, Chain):
            return self._chain(w, ctx)
        if isinstance(w, Chord):
            return self._chord(w, ctx)
        parts = [self.lay(m, ctx) for m in w.members]
        for m, part in zip(w.members, parts, strict=True):
            if len(part.terminal) != 1:
                raise ConfigError(f"a group member must end in one job, not {m!r}")
        return Laid(
            [f for p in parts for f in p.fragments],
            [j for p in parts for j in p.terminal],
            [s for p in parts for s in p.steps],
        )

    def _signature(self, s: Signature, ctx: Context) -> Laid:
        task = s.task_obj if s.task_obj is not None else self.app.get_task(s.task)
        msg = task.message(tuple(s.args), dict(s.kwargs), priority=s.priority, queue=s.queue)
        hooks = overriding(self.app.middleware, "before_enqueue")
        if hooks:  # each step's producer hooks run at launch, when its id is known
            msg = enqueue_through(hooks, msg)
        ttl = msg.result_ttl_s  # (a chord's header member too: its record lets it be cancelled)
        job_id = msg.id
        wf: dict[str, Any] = {}
        nexts = [*ctx.next, *(f for w in s.link for f in self.lay(w, Context()).fragments)]
        errbacks = [*ctx.errback, *(self._callback(e) for e in s.link_error)]
        for key, value in (
            ("next", nexts),
            ("fail", ctx.fail),
            ("chord", ctx.chord),
            ("abort", ctx.abort),
            ("errback", errbacks),
        ):
            if value:
                wf[key] = value
        frag = {
            "t": "job",
            "id": job_id,
            "task": msg.task,
            "args": list(msg.args),
            "kwargs": msg.kwargs,
            "queue": msg.queue,
            "priority": msg.priority,
            "ttl": ttl,
            "imm": s.immutable,
            "countdown_ms": int(s.countdown_s * 1000) if s.countdown_s else 0,
            "wf": wf or None,
        }
        if msg.headers:
            frag["headers"] = msg.headers
        job = Job(job_id, msg.task, msg.queue, msg.priority, stores_result=ttl is not None)
        return Laid([frag], [job], [frag])

    def _callback(self, s: Signature) -> dict[str, Any]:
        return self._signature(s, Context()).fragments[0]

    def _chain(self, c: Chain, ctx: Context) -> Laid:
        steps = with_implicit_chords(list(c.steps))
        errback = [*ctx.errback, *(self._callback(e) for e in c.link_error)]
        laid = self.lay(steps[-1], Context(ctx.next, ctx.fail, ctx.chord, ctx.abort, errback))
        all_steps, terminal = list(laid.steps), laid.terminal
        for step in reversed(steps[:-1]):  # every step after this one ends if it fails
            downstream = [_record_ref(f) for f in all_steps if f["ttl"] is not None]
            inner = Context(laid.fragments, [*downstream, *ctx.fail], None, ctx.abort, errback)
            laid = self.lay(step, inner)
            all_steps = [*laid.steps, *all_steps]
        return Laid(laid.fragments, terminal, all_steps)

    def _chord(self, c: Chord, ctx: Context) -> Laid:
        body = self.lay(c.body, ctx)
        if len(body.fragments) != 1 or body.fragments[0]["t"] != "job":
            raise ConfigError("a chord's body must start with one task (not a group or chord)")
        if body.fragments[0]["countdown_ms"]:
            raise ConfigError("a chord's body cannot have a countdown")
        first = body.fragments[0]
        chord_id = new_job_id()
        key = QueueKeys(first["queue"]).chord(chord_id)
        downstream = [_record_ref(f) for f in body.steps if f["ttl"] is not None]
        errback = [*ctx.errback, *(self._callback(e) for e in c.link_error)]
        abort = {"key": key, "fail": [*downstream, *ctx.fail], "errback": errback}
        members, steps = [], list(body.steps)
        for i, m in enumerate(c.header.members):
            laid = self.lay(m, Context(chord=[key, i], abort=[*ctx.abort, abort]))
            if len(laid.fragments) != 1 or len(laid.terminal) != 1:
                raise ConfigError(f"a chord header member must start with one task, not {m!r}")
            members += laid.fragments
            steps += laid.steps
        ttl = self.app.settings.result_ttl_s
        frag = {"t": "chord", "key": key, "n": len(members), "ttl": ttl, "body": first}
        frag["members"] = members
        return Laid([frag], body.terminal, steps)


def with_implicit_chords(steps: list[Workflow]) -> list[Workflow]:
    """A group followed by more steps is a chord whose body is the rest of the chain."""
    for i, step in enumerate(steps[:-1]):
        if isinstance(step, Group):
            rest = steps[i + 1 :]
            body = rest[0] if len(rest) == 1 else Chain(tuple(rest))
            if not isinstance(body, Signature | Chain):
                raise ConfigError("a group in a chain must be followed by a task or a chain")
            return [*steps[:i], Chord(step, body)]
    return steps


def _record_ref(frag: dict[str, Any]) -> list[Any]:
    """``[record key, done key, ttl ms]`` of a job fragment that keeps a record."""
    k = QueueKeys(frag["queue"])
    return [k.job(frag["id"]), k.done(frag["id"]), frag["ttl"] * 1000]
