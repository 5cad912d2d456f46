"""The ``taskq`` command: each subcommand parses options, builds values and calls one
function (see :mod:`taskq.cli.main` for the group)."""

from __future__ import annotations

from taskq.cli.acl import acl
from taskq.cli.dashboard import dashboard
from taskq.cli.deadletter import deadletter
from taskq.cli.inspect import inspect, purge
from taskq.cli.job import job
from taskq.cli.jobs import jobs
from taskq.cli.main import main
from taskq.cli.periodic import periodic
from taskq.cli.server import server
from taskq.cli.worker import worker

for command in (worker, server, inspect, purge, deadletter, job, periodic, acl, dashboard):
    main.add_command(command)
main.add_command(jobs)

__all__ = ["main"]
