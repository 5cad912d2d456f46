"""Virtualenvs the bench uses, created/updated on demand.

* project venv (``.venv``): taskq with hiredis (it is installed there), for the feature
  benches' taskq-only rows.
* ``bench/.venv-taskq-nohiredis``: taskq with redis-py's pure-Python parser.
* ``bench/.venv-taskq-hiredis``: taskq with hiredis, and the hiredis floor.
* ``bench/.venv-peers``: the peer queues from ``requirements-peers.txt``.
* ``bench/.venv-arq``: arq from ``requirements-arq.txt`` (arq needs redis-py < 6, the other
  peers are pinned to a newer one, so it cannot share ``.venv-peers``).
"""

from __future__ import annotations

import hashlib
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[1]
REPO = BENCH.parent
PROJECT_VENV = REPO / ".venv"
PEERS_VENV = BENCH / ".venv-peers"
NOHIREDIS_VENV = BENCH / ".venv-taskq-nohiredis"
HIREDIS_VENV = BENCH / ".venv-taskq-hiredis"
PEER_REQUIREMENTS = BENCH / "requirements-peers.txt"
ARQ_VENV = BENCH / ".venv-arq"
ARQ_REQUIREMENTS = BENCH / "requirements-arq.txt"
RESULTS = BENCH / "results"  # the stored reports and raw measurements
STAMP = ".bench-stamp"


def python_of(venv: Path) -> Path:
    """The interpreter of ``venv``."""
    return venv / "bin" / "python"


def _sh(*argv: str | Path) -> None:
    """Run a setup command; show its output only if it fails."""
    print("  $", " ".join(str(a) for a in argv), flush=True)
    proc = subprocess.run([str(a) for a in argv], capture_output=True, text=True, timeout=900)
    if proc.returncode:
        sys.stderr.write(proc.stdout + proc.stderr)
        raise SystemExit(f"setup command failed with status {proc.returncode}")


def _digest(*parts: str) -> str:
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()


def _fresh(venv: Path, digest: str) -> bool:
    stamp = venv / STAMP
    return python_of(venv).exists() and stamp.exists() and stamp.read_text() == digest


def _create(venv: Path) -> None:
    if not python_of(venv).exists():
        _sh("python3", "-m", "venv", venv)
        _sh(python_of(venv), "-m", "pip", "install", "-q", "--upgrade", "pip")


def pip_version(venv: Path, dist: str) -> str | None:
    """Installed version of ``dist`` in ``venv`` (None if absent)."""
    code = (
        "import importlib.metadata as m\n"
        f"try: print(m.version({dist!r}))\n"
        "except m.PackageNotFoundError: pass"
    )
    out = subprocess.run([python_of(venv), "-c", code], capture_output=True, text=True, timeout=60)
    return out.stdout.strip() or None


def _ensure_requirements(venv: Path, requirements: Path) -> None:
    """Create/update ``venv`` from ``requirements``, without hiredis."""
    digest = _digest(requirements.read_text())
    if _fresh(venv, digest):
        return
    print(f"setting up {venv} ...", flush=True)
    _create(venv)
    _sh(python_of(venv), "-m", "pip", "install", "-q", "-r", requirements)
    if pip_version(venv, "hiredis"):
        _sh(python_of(venv), "-m", "pip", "uninstall", "-q", "-y", "hiredis")
    (venv / STAMP).write_text(digest)


def ensure_peers() -> None:
    """Create/update the peers venv from requirements-peers.txt."""
    _ensure_requirements(PEERS_VENV, PEER_REQUIREMENTS)


def ensure_arq() -> None:
    """Create/update the arq venv from requirements-arq.txt (arq's hiredis extra removed)."""
    _ensure_requirements(ARQ_VENV, ARQ_REQUIREMENTS)


def taskq_present() -> bool:
    """True once the taskq package exists in the repo."""
    return (REPO / "taskq" / "__init__.py").exists()


def peers_redis_version() -> str | None:
    """The redis-py version ``requirements-peers.txt`` pins, which the ``taskq`` row's venv
    installs too: a start-up or a drain compared with a peer's then loads and runs the same
    client library (8.2.0's ``import redis`` alone is 31M instructions over 8.1.0's)."""
    for line in PEER_REQUIREMENTS.read_text().splitlines():
        name, _, version = line.partition("==")
        if name.strip() == "redis" and version.strip():
            return version.strip()
    return None


def ensure_taskq() -> None:
    """Install taskq (editable) on the peers' redis-py in two venvs of its own, one without
    hiredis and one with it (the rows ``taskq`` and ``taskq + hiredis``, and the hiredis
    floor), and with hiredis in the project venv when it lacks them (the feature benches'
    taskq-only rows run there)."""
    if not taskq_present():
        return
    if not (pip_version(PROJECT_VENV, "taskq") and pip_version(PROJECT_VENV, "hiredis")):
        print(f"installing taskq[hiredis] (editable) into {PROJECT_VENV} ...", flush=True)
        _sh(python_of(PROJECT_VENV), "-m", "pip", "install", "-q", "-e", f"{REPO}[hiredis]")
    redis_version = peers_redis_version() or pip_version(PROJECT_VENV, "redis") or ""
    _ensure_taskq_venv(NOHIREDIS_VENV, redis_version, hiredis=False)
    _ensure_taskq_venv(HIREDIS_VENV, redis_version, hiredis=True)


def _ensure_taskq_venv(venv: Path, redis_version: str, *, hiredis: bool) -> None:
    """Create/update ``venv``: taskq (editable) and its dependencies only, redis-py at
    ``redis_version``, hiredis as asked. Nothing else: the project venv has what a developer
    installed too, such as the ``test`` extra's ``opentelemetry-sdk``, which redis-py 8.2
    loads at ``import redis`` (about 1.5x its time), and which a start-up compared with
    Huey's would count as taskq's."""
    extra = "[hiredis]" if hiredis else ""
    digest = _digest((REPO / "pyproject.toml").read_text(), redis_version, extra)
    if _fresh(venv, digest):
        return
    print(f"setting up {venv} ...", flush=True)
    _create(venv)
    pin = f"redis=={redis_version}" if redis_version else "redis"
    _sh(python_of(venv), "-m", "pip", "install", "-q", "-e", f"{REPO}{extra}", pin)
    if not hiredis and pip_version(venv, "hiredis"):
        _sh(python_of(venv), "-m", "pip", "uninstall", "-q", "-y", "hiredis")
    (venv / STAMP).write_text(digest)


if __name__ == "__main__":
    ensure_peers()
    ensure_taskq()
    sys.exit(0)
