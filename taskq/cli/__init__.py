"""The ``taskq`` command: each subcommand parses options, builds values and calls one
function (see :mod:`taskq.cli.main` for the group, which imports a subcommand when it is
used)."""

from __future__ import annotations

from taskq.cli.main import main

__all__ = ["main"]
