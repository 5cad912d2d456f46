"""The Sentry integration is optional: taskq never imports sentry_sdk, and without the extra
importing taskq.contrib.sentry says which extra to install."""

from __future__ import annotations

import subprocess
import sys

from tests.conftest import ROOT


def _run(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60
    )


def test_taskq_and_its_worker_do_not_import_sentry_sdk() -> None:
    code = (
        "import sys, taskq, taskq.contrib, taskq.testing, taskq.cli, taskq.worker.pool\n"
        "print('sentry_sdk' in sys.modules)"
    )
    done = _run(code)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "False"


def test_without_the_extra_the_import_error_names_it() -> None:
    code = (
        "import sys\n"
        "sys.modules['sentry_sdk'] = None  # as if sentry-sdk were not installed\n"
        "try:\n"
        "    import taskq.contrib.sentry\n"
        "except ImportError as exc:\n"
        "    print(exc)\n"
    )
    done = _run(code)
    assert done.returncode == 0, done.stderr
    assert "pip install 'taskq[sentry]'" in done.stdout
