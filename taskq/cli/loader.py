"""Find and import the user's app from ``-A``, ``TASKQ_APP`` or ``[tool.taskq]`` in pyproject."""

from __future__ import annotations

import importlib
import os
import sys
from pathlib import Path

from taskq.app import App
from taskq.errors import ConfigError


def app_path(explicit: str | None) -> str | None:
    """The ``module[:attr]`` to load, from the flag, the environment or pyproject.toml."""
    if explicit:
        return explicit
    if os.environ.get("TASKQ_APP"):
        return os.environ["TASKQ_APP"]
    pyproject = Path.cwd() / "pyproject.toml"
    if sys.version_info < (3, 11):  # no tomllib: use -A or TASKQ_APP
        return None
    import tomllib

    if pyproject.is_file():
        try:
            config = tomllib.loads(pyproject.read_text()).get("tool", {}).get("taskq", {})
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"pyproject.toml: {exc}") from None
        if isinstance(config.get("app"), str):
            return str(config["app"])
    return None


def load_app(path: str) -> App:
    """Import ``module:attr`` (attr defaults to ``app``, else the module's only App)."""
    module_name, _, attr = path.partition(":")
    if str(Path.cwd()) not in sys.path:
        sys.path.insert(0, str(Path.cwd()))
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        raise ConfigError(f"cannot import app module {module_name!r}: {exc}") from None
    except Exception as exc:
        raise ConfigError(
            f"importing app module {module_name!r} failed: {type(exc).__name__}: {exc}"
        ) from None
    if attr:
        found = getattr(module, attr, None)
        if not isinstance(found, App):
            raise ConfigError(f"{module_name!r} has no App named {attr!r}")
        return found
    apps = [v for v in vars(module).values() if isinstance(v, App)]
    if isinstance(getattr(module, "app", None), App):
        return module.app  # type: ignore[no-any-return]
    if len(apps) == 1:
        return apps[0]
    if not apps:
        raise ConfigError(f"{module_name!r} has no App (taskq.App instance) at module level")
    raise ConfigError(f"{module_name!r} has several Apps: name one with {module_name}:ATTR")
