"""Log setup for the command line: plain text or one JSON object per line."""

from __future__ import annotations

import io
import json
import logging
import sys
from typing import Any

_STANDARD = set(logging.makeLogRecord({}).__dict__) | {"message", "asctime"}


class JsonFormatter(logging.Formatter):
    """One JSON object per record, with any ``extra`` fields (job_id, task, ...) included."""

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "ts": round(record.created, 6),
            "level": record.levelname.lower(),
            "logger": record.name,
            "pid": record.process,
            "msg": record.getMessage(),
        }
        out.update({k: v for k, v in record.__dict__.items() if k not in _STANDARD})
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        return json.dumps(out, default=str, ensure_ascii=False)


def configure(level: str = "info", fmt: str = "text") -> None:
    """Send taskq's logs to stderr at ``level`` in ``fmt`` ("text" or "json")."""
    if isinstance(sys.stderr, io.TextIOWrapper):
        # A task's error text may hold lone surrogates; print them escaped, not as a
        # logging error in place of the line.
        sys.stderr.reconfigure(errors="backslashreplace")
    handler = logging.StreamHandler(sys.stderr)
    if fmt == "json":
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(
            logging.Formatter("%(asctime)s %(levelname)s [%(process)d] %(message)s")
        )
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
