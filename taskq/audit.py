"""The control plane's audit trail, as values: one :class:`AuditEntry` per pause, resume,
limit change or cancel, in the stream ``<queue>:audit`` of the queue it acted on. Written
with the change (the same script, where the change is one), read by ``taskq audit`` and the
dashboard."""

from __future__ import annotations

import json
import socket
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

ACTIONS = ("pause", "resume", "limit_set", "limit_clear", "cancel", "fair_weight")


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
    def fields(action: str, user: str, detail: Mapping[str, Any]) -> list[str]:
        """An entry's stream fields (the queue is the stream's; the time its id)."""
        return ["action", action, "user", user, "host", socket.gethostname(), "detail",
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
