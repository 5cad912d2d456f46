"""Pauses and limits set at run time, as values. Pauses: what ``taskq pause`` and
``app.pause()`` stop. A pause covers a whole
queue, one task of it, one ``limit_key`` value (of every task, or of one task). It lives in
the queue's hash ``<queue>:paused`` (field :attr:`Pause.field`, value: when it was paused,
ms) until resumed; the jobs a worker fetched while a pause covers them wait in the pause's
own set, ``<queue>:held:paused:<field>``, out of their stream, until the resume moves them
back (docs/operations.md, "Pause and resume")."""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import NamedTuple

from taskq.errors import ConfigError
from taskq.limits import Rate

MAX_NAME_CHARS = 1_000
"""Longest task name or key a pause names."""


class _PauseFields(NamedTuple):
    task: str | None
    key: str | None


class Pause(_PauseFields):
    """One pause: ``task`` None covers every task, ``key`` None every limit key. Pauses and
    limits are named tuples checked in ``__new__``, not frozen dataclasses: a worker defines
    them before its first job, and a frozen dataclass costs about 4M instructions to define,
    a named tuple under 1M."""

    __slots__ = ()

    def __new__(cls, task: str | None = None, key: str | None = None) -> Pause:
        for name, value in (("task", task), ("key", key)):
            if value is not None and (
                not isinstance(value, str) or not value or len(value) > MAX_NAME_CHARS
            ):
                raise ConfigError(f"pause: {name} must be a non-empty string, not {value!r}")
        return super().__new__(cls, task, key)

    @property
    def field(self) -> str:
        """Its field in ``<queue>:paused``: ``<len(task)>:<task>:<key>`` (``0::`` for the
        whole queue), which no two pauses share."""
        task = self.task or ""
        return f"{len(task)}:{task}:{self.key or ''}"

    @classmethod
    def from_field(cls, field: str) -> Pause | None:
        """The pause of a field, or None for one that is not a pause's (read from Redis,
        untrusted)."""
        size, _, rest = field.partition(":")
        if not size.isdigit() or len(rest) < int(size) + 1 or rest[int(size)] != ":":
            return None
        task, key = rest[: int(size)], rest[int(size) + 1 :]
        try:
            return cls(task or None, key or None)
        except ConfigError:
            return None

    def covers(self, task: str, key: object) -> bool:
        """Whether a job of ``task`` whose limit key is ``key`` (None: none) is paused."""
        if self.task is not None and self.task != task:
            return False
        return self.key is None or (key is not None and str(key) == self.key)

    def describe(self) -> str:
        """How operators read it: ``the queue``, ``task T``, ``key K``, ``task T, key K``."""
        parts = [f"task {self.task}"] if self.task else []
        parts += [f"key {self.key}"] if self.key else []
        return ", ".join(parts) or "the queue"


class _LimitFields(NamedTuple):
    rate: str | None
    concurrency: int | None


class LimitOverride(_LimitFields):
    """A limit set at run time (``taskq limit set``) for ``task`` (all its jobs, or those of
    limit key ``key``): a rate (``"5/s"``) and/or a concurrency, each None to keep the
    decorator's."""

    __slots__ = ()

    def __new__(cls, rate: str | None = None, concurrency: int | None = None) -> LimitOverride:
        if rate is not None:
            Rate.parse(rate)  # a clear error for a bad rate
        c = concurrency
        if c is not None and (isinstance(c, bool) or not isinstance(c, int) or c < 1):
            raise ConfigError(f"concurrency must be a whole number >= 1, not {c!r}")
        return super().__new__(cls, rate, concurrency)

    def to_json(self) -> str:
        return json.dumps({"rate": self.rate, "concurrency": self.concurrency})

    @classmethod
    def from_json(cls, raw: str) -> LimitOverride | None:
        """The override stored in Redis, or None if it is not one (untrusted)."""
        try:
            data = json.loads(raw)
            return (
                cls(data.get("rate"), data.get("concurrency")) if isinstance(data, dict) else None
            )
        except (ValueError, ConfigError, TypeError):
            return None


def covering(pauses: Iterable[Pause], task: str, key: object) -> Pause | None:
    """The first of ``pauses`` that covers a job of ``task`` with limit key ``key``."""
    return next((p for p in pauses if p.covers(task, key)), None)
