"""``import taskq`` and ``taskq --version`` load almost nothing: the public names and the CLI's
subcommands are imported on first use, and every public name still resolves to what it was."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import click
from click.testing import CliRunner

import taskq
from taskq.cli.main import COMMANDS, main

# Modules a bare ``import taskq`` or ``taskq --version`` must not load: redis-py, msgpack, the
# app and the CLI's subcommands (each loads the app and through it redis-py).
HEAVY = ("redis", "msgpack", "asyncio", "taskq.app", "taskq.broker", "taskq.cli.worker")


def _printed_by(code: str) -> list[str]:
    """The lines ``code`` prints in a fresh interpreter."""
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    ).stdout.splitlines()


def _loaded_after(code: str) -> list[str]:
    """The modules loaded in a fresh interpreter after running ``code``."""
    probe = f"import sys\n{code}\nprint(__import__('json').dumps(sorted(sys.modules)))"
    return list(json.loads(_printed_by(probe)[-1]))


def _heavy(modules: list[str]) -> list[str]:
    return [m for m in modules if any(m == h or m.startswith(h + ".") for h in HEAVY)]


def test_import_taskq_loads_no_heavy_module() -> None:
    assert _heavy(_loaded_after("import taskq")) == []


def test_taskq_version_loads_no_heavy_module() -> None:
    code = "import taskq.cli\ntry:\n    taskq.cli.main(['--version'])\nexcept SystemExit:\n    pass"
    assert _heavy(_loaded_after(code)) == []


def test_a_public_name_loads_its_module_on_first_use() -> None:
    loaded = _loaded_after("import taskq\ntaskq.Settings")
    assert "taskq.config" in loaded
    assert "taskq.app" not in loaded


def test_every_public_name_resolves_to_its_definition() -> None:
    for name in taskq.__all__:
        value = getattr(taskq, name)
        module = taskq.LAZY.get(name)
        if module is not None:
            assert value is getattr(sys.modules[module], name), name
    assert callable(taskq.task) and not isinstance(taskq.task, type(taskq))
    assert sorted(set(dir(taskq)) & set(taskq.__all__)) == sorted(taskq.__all__)


def test_the_lazy_table_the_type_checking_imports_and_all_agree() -> None:
    """What mypy sees (the ``TYPE_CHECKING`` imports) is what the table loads at run time."""
    tree = ast.parse(Path(taskq.__file__).read_text())
    seen: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for imp in node.body:
                assert isinstance(imp, ast.ImportFrom) and imp.module
                seen.update({alias.name: imp.module for alias in imp.names})
    assert seen == taskq.LAZY
    assert set(taskq.LAZY) <= set(taskq.__all__)


def test_every_subcommand_loads_and_is_listed() -> None:
    result = CliRunner().invoke(main, ["--help"])
    assert result.exit_code == 0, result.output
    ctx = click.Context(main)
    for name in COMMANDS:
        assert main.get_command(ctx, name) is not None, name
        assert f"  {name} " in result.output, name


def test_a_worker_loads_no_module_it_needs_only_later() -> None:
    """What ``taskq worker`` imports before its first job leaves out what it may never use:
    ``decimal`` (the first Decimal argument loads it), the periodic schedules with ``cron``
    (``app.periodic``), the autoscaler (``--autoscale``) and the typed dicts of the keyword
    arguments (``taskq.kwargs``, for type checkers)."""
    loaded = _loaded_after("import taskq.cli.worker\nfrom taskq import App\nApp()")
    later = ("decimal", "taskq.periodic", "taskq.cron", "taskq.worker.autoscale", "taskq.kwargs")
    assert [m for m in later if m in loaded] == []


def test_a_decimal_is_carried_when_decimal_loads_after_the_codec() -> None:
    code = (
        "from taskq import codec\nimport decimal\n"
        "print(codec.unpackb(codec.packb((decimal.Decimal('1.5'),))))"
    )
    assert _printed_by(code) == ["(Decimal('1.5'),)"]


def test_the_keyword_typed_dicts_load_on_first_use() -> None:
    """``SettingsArgs`` and ``TaskOptionArgs`` are still names of ``taskq.config`` and
    ``taskq.options`` (the typed dicts of :mod:`taskq.kwargs`); other names still fail."""
    code = (
        "import sys, taskq.config, taskq.options\n"
        "print('taskq.kwargs' in sys.modules)\n"
        "from taskq.config import SettingsArgs\nfrom taskq.options import TaskOptionArgs\n"
        "import taskq.kwargs as k\n"
        "print(SettingsArgs is k.SettingsArgs, TaskOptionArgs is k.TaskOptionArgs)\n"
        "print(not k.SettingsArgs.__required_keys__ and not k.TaskOptionArgs.__required_keys__)\n"
        "for m in (taskq.config, taskq.options):\n"
        "    try:\n        m.Nothing\n    except AttributeError as e:\n        print(e)"
    )
    assert _printed_by(code) == [
        "False",
        "True True",
        "True",
        "module 'taskq.config' has no attribute 'Nothing'",
        "module 'taskq.options' has no attribute 'Nothing'",
    ]


def _generations_after_loading_the_worker(owns_process: bool) -> list[int]:
    """[objects waiting for a collection, frozen, in the oldest generation] after
    ``taskq worker``'s modules load under ``NoCollection``, in a fresh interpreter."""
    probe = (
        "import gc, json\n"
        "from taskq.cli.main import NoCollection\n"
        f"NoCollection.owns_process = {owns_process}\n"
        "with NoCollection():\n"
        "    import taskq.cli.worker\n"
        "assert gc.isenabled()\n"
        "print(json.dumps([gc.get_count()[0], gc.get_freeze_count(), len(gc.get_objects(2))]))"
    )
    return list(json.loads(_printed_by(probe)[-1]))


def test_the_commands_modules_go_to_the_oldest_generation_unwalked() -> None:
    """In a process of its own, what ``taskq worker`` loads is moved out of the collector's
    way: once on, it would first walk every object (tens of thousands: a tenth of the
    worker's start). Nothing stays frozen."""
    waiting, frozen, oldest = _generations_after_loading_the_worker(owns_process=True)
    assert waiting < 1_000, waiting
    assert frozen == 0
    assert oldest > 10_000, oldest


def test_the_cli_called_in_process_leaves_the_collectors_generations_alone() -> None:
    """Called in-process (a test's ``CliRunner``), the CLI does not move the caller's young
    garbage out of reach of the next collections."""
    waiting, frozen, _ = _generations_after_loading_the_worker(owns_process=False)
    assert waiting > 10_000, waiting
    assert frozen == 0


def test_python_m_taskq_runs_as_the_process_owner() -> None:
    probe = (
        "import sys\nsys.argv = ['taskq', '--version']\n"
        "from taskq.cli.main import NoCollection\n"
        "try:\n    import taskq.__main__\nexcept SystemExit:\n    pass\n"
        "print(NoCollection.owns_process)"
    )
    assert _printed_by(probe)[-1] == "True"
