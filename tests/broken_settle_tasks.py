"""The tasks of :mod:`tests.tasks` in a worker whose settling of an exited child's jobs fails
on a bug (not a Redis error): a cold shutdown must stop anyway, and leave those jobs pending
for the sweep."""

from __future__ import annotations

from typing import NoReturn

from taskq.worker.finish import Finisher
from tests.tasks import app

__all__ = ["app"]


def _fails(*_args: object, **_kwargs: object) -> NoReturn:
    raise RuntimeError("a bug in settling an exited child's jobs")


Finisher.recover_exited = _fails  # type: ignore[method-assign]
