"""The control plane's audit trail, as values: one :class:`AuditEntry` per pause, resume,
limit change or cancel, and per action taken on the dashboard, in the stream
``<queue>:audit`` of the queue it acted on. Written with the change (the same script, where
the change is one; after it, for the dashboard's), read by ``taskq audit`` and the
dashboard."""

from __future__ import annotations

import json
import socket
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

ACTIONS = ("pause", "resume", "limit_set", "limit_clear", "cancel", "fair_weight")
DASHBOARD_ACTIONS = (
    "jobs_cancel", "jobs_delete", "jobs_retry", "jobs_move", "job_cancel",
    "deadletter_retry", "deadletter_purge",
)  # fmt: skip
"""What the dashboard records: its user (the authenticated one, or ``dashboard``), the
remote address as the host, and in ``detail`` the state, filter and how many jobs."""


@dataclass(frozen=True)
class AuditEntry:
    """One control action: when (ms, Redis clock: the entry id), who (the Redis ACL user),
    from which host, what, on which queue, with what (``detail``: a JSON object)."""

    at_ms: int
    action: str
    queue: str
    user: str
    host: str
    detail: Mapping[str, Any]
    entry_id: str = ""

    @staticmethod
    def fields(
        action: str, user: str, detail: Mapping[str, Any], host: str | None = None
    ) -> list[str]:
        """An entry's stream fields (the queue is the stream's; the time its id); the host
        is this one unless given."""
        return ["action", action, "user", user, "host", host or socket.gethostname(), "detail",
                json.dumps(detail, sort_keys=True)]  # fmt: skip

    @classmethod
    def from_entry(cls, queue: str, entry_id: str, fields: Mapping[str, str]) -> AuditEntry:
        """An entry read back (untrusted: a field missing or not JSON reads as empty)."""
        try:
            detail = json.loads(fields.get("detail", "{}"))
        except ValueError:
            detail = {}
        ms, _, _ = entry_id.partition("-")
        return cls(
            int(ms) if ms.isdigit() else 0,
            fields.get("action", ""),
            queue,
            fields.get("user", ""),
            fields.get("host", ""),
            detail if isinstance(detail, dict) else {},
            entry_id,
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "at_ms": self.at_ms, "action": self.action, "queue": self.queue, "user": self.user,
            "host": self.host, "detail": dict(self.detail), "entry_id": self.entry_id,
        }  # fmt: skip
