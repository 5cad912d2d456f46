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


def runtime_imports(path: Path) -> set[str]:
    """Modules ``path`` imports when it runs (anywhere but under ``if TYPE_CHECKING:``)."""
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
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
    name: {m for m in runtime_imports(path) if m in MODULES and m != name}
    for name, path in MODULES.items()
}


def test_no_module_imports_itself_through_others() -> None:
    cycles = []
    state: dict[str, str] = {}

    def walk(node: str, path: list[str]) -> None:
        state[node] = "open"
        for nxt in sorted(GRAPH[node]):
            if state.get(nxt) == "open":
                cycles.append([*path[path.index(nxt) :], nxt])
            elif nxt not in state:
                walk(nxt, [*path, nxt])
        state[node] = "done"

    for name in sorted(GRAPH):
        if name not in state:
            walk(name, [name])
    assert not cycles, "import circles: " + "; ".join(" -> ".join(c) for c in cycles)


def test_only_the_broker_imports_redis() -> None:
    users = sorted(
        name
        for name, path in MODULES.items()
        if not name.startswith("taskq.broker")
        and any(m == "redis" or m.startswith("redis.") for m in runtime_imports(path))
    )
    assert users == []


def test_the_tree_reads_as_the_data_flow() -> None:
    folders = {p.name for p in ROOT.iterdir() if p.is_dir() and not p.name.startswith("_")}
    assert {"broker", "worker", "ops", "cli"} <= folders
    sizes = {name: len(path.read_text().splitlines()) for name, path in MODULES.items()}
    assert not {name: n for name, n in sizes.items() if n > 420}, "modules stay small"
