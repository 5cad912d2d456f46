"""The package's shape: no import circle, and redis-py only inside taskq/broker/."""

from __future__ import annotations

import ast
from pathlib import Path

import taskq

ROOT = Path(taskq.__file__).parent


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for p in ROOT.rglob("*.py")}
MODULE_NAMES = set(MODULES)


def imports(path: Path, *, for_mypy: bool = True) -> set[str]:
    """Modules ``path`` imports: at module level, inside functions, and (``for_mypy``) under
    ``if TYPE_CHECKING:``, which mypy reads, so that a circle there is a circle all the same."""
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        if not for_mypy and isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            # `from pkg import mod` needs the submodule (its package is already loading);
            # `from mod import name` needs the module.
            subs = {f"{node.module}.{alias.name}" for alias in node.names} & MODULE_NAMES
            found.update(subs or {node.module})
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(ast.parse(path.read_text()))
    return found


GRAPH = {
    name: {m for m in imports(path) if m in MODULES and m != name} for name, path in MODULES.items()
}


def circles(graph: dict[str, set[str]]) -> list[set[str]]:
    """The groups of modules that import each other (Tarjan's strongly connected
    components of more than one module)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    groups: list[set[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in graph[node]:
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            group = {stack.pop()}
            while node not in group:
                group.add(stack.pop())
            if len(group) > 1:
                groups.append(group)

    for name in sorted(graph):
        if name not in index:
            visit(name)
    return groups


def test_no_module_imports_itself_through_others() -> None:
    """Each module imports only modules below it, counting imports inside functions and
    under ``TYPE_CHECKING``: a lower module that needs something of a higher one names a
    small Protocol instead (taskq/protocols.py)."""
    found = circles(GRAPH)
    assert not found, "modules that import each other: " + "; ".join(
        ", ".join(sorted(g)) for g in found
    )


def test_the_circle_check_sees_imports_inside_functions_and_for_mypy(tmp_path: Path) -> None:
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [{"a", "b", "c"}]
    probe = tmp_path / "probe.py"
    probe.write_text(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from taskq.app import App\n"
        "def f():\n    from taskq.launch import launch_steps\n"
    )
    assert {"taskq.app", "taskq.launch"} <= imports(probe)
    assert imports(probe, for_mypy=False) == {"typing", "taskq.launch"}


def test_only_the_broker_imports_redis() -> None:
    users = sorted(
        name
        for name, path in MODULES.items()
        if not name.startswith("taskq.broker")
        and any(m == "redis" or m.startswith("redis.") for m in imports(path, for_mypy=False))
    )
    assert users == []


def test_the_tree_reads_as_the_data_flow() -> None:
    folders = {p.name for p in ROOT.iterdir() if p.is_dir() and not p.name.startswith("_")}
    assert {"broker", "worker", "ops", "cli"} <= folders
    sizes = {name: len(path.read_text().splitlines()) for name, path in MODULES.items()}
    assert not {name: n for name, n in sizes.items() if n > 420}, "modules stay small"


def test_the_producer_never_imports_the_worker() -> None:
    """An application's process (App, its tasks, eager mode) loads nothing of the worker."""
    runtime = {
        name: {m for m in imports(p, for_mypy=False) if m in MODULES} for name, p in MODULES.items()
    }
    loaded: set[str] = set()
    todo = ["taskq.app"]
    while todo:
        name = todo.pop()
        if name not in loaded:
            loaded.add(name)
            todo += runtime[name]
    assert sorted(m for m in loaded if m.startswith("taskq.worker")) == []
