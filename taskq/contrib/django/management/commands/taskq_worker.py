"""``manage.py taskq_worker [OPTIONS]``: ``taskq worker -A taskq.contrib.django``, with the
settings manage.py chose (``manage.py taskq_worker --help`` lists the options)."""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from typing import Any

import click
from django.core.management.base import BaseCommand, CommandParser

from taskq.cli.main import Context
from taskq.cli.worker import worker
from taskq.errors import TaskqError

APP = "taskq.contrib.django"


class Command(BaseCommand):
    help = "Run a taskq worker for this project (the options of `taskq worker`)."

    def run_from_argv(self, argv: list[str]) -> None:
        # The options are taskq worker's, parsed by click rather than argparse.
        run_worker(argv[2:], prog_name=f"{os.path.basename(argv[0])} {argv[1]}")

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("worker_args", nargs="*", help="options of taskq worker")

    def handle(self, *args: Any, **options: Any) -> None:
        run_worker(options["worker_args"], prog_name="taskq_worker")


def run_worker(args: Sequence[str], prog_name: str) -> None:
    """Run the ``taskq worker`` command on this project's app (exits with its status)."""
    # As the taskq command does: TASKQ_REDIS_URL overrides the app's URL (--redis-url).
    obj = Context(APP, os.environ.get("TASKQ_REDIS_URL") or None)
    try:
        code = worker.main(list(args), prog_name, obj=obj, standalone_mode=False)
    except TaskqError as exc:
        click.ClickException(str(exc)).show()
        sys.exit(1)
    except click.ClickException as exc:
        exc.show()
        sys.exit(exc.exit_code)
    except click.Abort:
        sys.exit(1)
    sys.exit(code if isinstance(code, int) else 0)
