"""Parsers for Redis's raw (RESP2) replies, shared by the broker and its readers.

Bulk strings arrive as bytes, integers as ints, arrays as lists; a missing key reads as an
empty list or None. Every parser here takes what Redis sent and returns plain Python values.
"""

from __future__ import annotations

from typing import Any


def text(value: Any) -> str:
    """A bulk string (or anything) as text; bytes that are not UTF-8 are replaced."""
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


def as_int(value: Any, default: int = 0) -> int:
    """An integer reply (or a bulk string holding one); ``default`` for anything else."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    try:
        return int(value)
    except (TypeError, ValueError):
        return default


def flat_pairs(value: Any) -> dict[bytes, Any]:
    """``[f1, v1, f2, v2, ...]`` (HGETALL, a stream entry's fields) as a dict."""
    if isinstance(value, dict):
        return value
    if not isinstance(value, list):
        return {}
    return dict(zip(value[::2], value[1::2], strict=False))  # (an odd last one is dropped)


def info_records(value: Any) -> list[dict[str, Any]]:
    """XINFO GROUPS / XINFO CONSUMERS: one dict per record, keys as text."""
    if not isinstance(value, list):
        return []
    return [{text(k): v for k, v in flat_pairs(record).items()} for record in value]


def entries(value: Any) -> list[tuple[str, dict[bytes, Any]]]:
    """XRANGE / XREVRANGE / one stream of XREADGROUP: ``(entry id, fields)`` pairs."""
    if not isinstance(value, list):
        return []
    return [(text(row[0]), flat_pairs(row[1])) for row in value if isinstance(row, list)]


def pending_rows(value: Any) -> list[tuple[str, str, int, int]]:
    """XPENDING's extended form: ``(entry id, consumer, idle ms, deliveries)`` rows."""
    if not isinstance(value, list):
        return []
    return [(text(r[0]), text(r[1]), as_int(r[2]), as_int(r[3])) for r in value]


def scored(value: Any) -> list[tuple[bytes, float]]:
    """ZRANGE ... WITHSCORES: ``(member, score)`` pairs."""
    if not isinstance(value, list):
        return []
    return [(value[i], float(value[i + 1])) for i in range(0, len(value) - 1, 2)]


def redis_ms(value: Any) -> int:
    """TIME's reply (seconds, microseconds) in milliseconds."""
    seconds, micros = value
    return int(seconds) * 1000 + int(micros) // 1000
