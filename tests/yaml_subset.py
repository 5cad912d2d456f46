"""A reader of the YAML subset examples/k8s/ is written in (PyYAML is not a dependency):
``---`` between documents, ``#`` comments on their own lines, block mappings and sequences
by indentation, plain or double-quoted scalars, and JSON flow lists. Anything else is an
error, so an example cannot drift into YAML this reader would misread."""

from __future__ import annotations

import json
import re
from typing import Any

_KEY = re.compile(r"^([A-Za-z_][\w.-]*):(?: (.*))?$")


def load_all(text: str) -> list[Any]:
    """Every document of ``text``."""
    docs = re.split(r"^---\s*$", text, flags=re.MULTILINE)
    return [_block(_lines(doc), 0)[0] for doc in docs if _lines(doc)]


def _lines(doc: str) -> list[tuple[int, str]]:
    out = []
    for raw in doc.splitlines():
        stripped = raw.strip()
        if stripped and not stripped.startswith("#"):
            out.append((len(raw) - len(raw.lstrip(" ")), stripped))
    return out


def _block(lines: list[tuple[int, str]], at: int) -> tuple[Any, int]:
    indent = lines[at][0]
    if lines[at][1].startswith("- "):
        return _sequence(lines, at, indent)
    return _mapping(lines, at, indent)


def _sequence(lines: list[tuple[int, str]], at: int, indent: int) -> tuple[list[Any], int]:
    items: list[Any] = []
    while at < len(lines) and lines[at][0] == indent and lines[at][1].startswith("- "):
        rest = lines[at][1][2:]
        if _KEY.match(rest):  # a mapping item: its first key shares the dash's line
            sub = [(indent + 2, rest), *lines[at + 1 :]]
            value, used = _mapping(sub, 0, indent + 2)
            items.append(value)
            at += used
        else:
            items.append(_scalar(rest))
            at += 1
    return items, at


def _mapping(lines: list[tuple[int, str]], at: int, indent: int) -> tuple[dict[str, Any], int]:
    out: dict[str, Any] = {}
    while at < len(lines) and lines[at][0] == indent and not lines[at][1].startswith("- "):
        found = _KEY.match(lines[at][1])
        if not found:
            raise ValueError(f"not in the subset: {lines[at][1]!r}")
        key, value = found.groups()
        if value is not None:
            out[key] = _scalar(value)
            at += 1
        elif at + 1 < len(lines) and lines[at + 1][0] > indent:
            out[key], at = _block(lines, at + 1)
        elif at + 1 < len(lines) and lines[at + 1][0] == indent and lines[at + 1][1][:2] == "- ":
            out[key], at = _sequence(lines, at + 1, indent)  # a list not indented under it
        else:
            out[key] = None
            at += 1
    if at < len(lines) and lines[at][0] > indent:
        raise ValueError(f"bad indentation: {lines[at][1]!r}")
    return out, at


def _scalar(text: str) -> Any:
    if text.startswith(("[", '"')):
        return json.loads(text)
    if re.fullmatch(r"-?\d+", text):
        return int(text)
    if text in ("true", "false"):
        return text == "true"
    if any(c in text for c in "{}[]&*!|>'\"%@`") or ": " in text or " #" in text:
        raise ValueError(f"not in the subset: {text!r}")
    return text
