"""The job status record has one list of fields: every Lua script that touches a record
spells only fields of ``taskq.record.FIELDS``, and docs/protocol.md's table lists exactly
those.

The scripts are read as text: every hash command (``redis.call('HSET', key, ...)``) and every
call of the record helpers of ``_record.lua`` (``finish_record``, ``record_attempt``). Each
hash command's key is classified by :data:`KEY_KINDS` (script, enclosing function, key
expression); a key that is not there, a field that is not a literal, or a command the scan
cannot read fails the test, so a new write is classified rather than missed.
"""

from __future__ import annotations

import itertools
import re
from pathlib import Path
from typing import NamedTuple

import taskq
from taskq import record

LUA = Path(taskq.__file__).parent / "broker" / "lua"
PROTOCOL = Path(__file__).parents[2] / "docs" / "protocol.md"
MAIN = "<main>"

KEY_KINDS = {
    ("_flow", "refill", "prefix .. ':counts'"): "counts",
    ("_flow", "refill", "rec"): "record",
    ("_flow", "cancelled_step", "record"): "record",
    ("_flow", "op_job", "op[6]"): "record",
    ("_flow", "op_schedule", "op[6]"): "record",
    ("_flow", "chord_state", "key"): "chord",
    ("_flow", "op_chord_add", "op[2]"): "chord",
    ("_flow", "record", "op[2]"): "record",
    ("_flow", "chord_new", "op[2]"): "chord",
    ("_flow", "flow", "op[2]"): "flow",
    ("_record", "record_attempt", "rec"): "record",
    ("_record", "fresh_record", "rec"): "record",
    ("_record", "finish_record", "rec"): "record",
    ("cancel", MAIN, "rec"): "record",
    ("checkpoint", MAIN, "KEYS[2]"): "steps",
    ("aside", MAIN, "paused"): "paused",
    ("aside", MAIN, "KEYS[3]"): "counts",
    ("aside", MAIN, "KEYS[4]"): "record",
    ("cancel", MAIN, "KEYS[11]"): "counts",
    ("cancel", "cancel_unrecorded", "KEYS[11]"): "counts",
    ("cancel", "cancel_unrecorded", "tombs"): "cancelled",
    ("cancel", "pass_on_slot", "rec"): "record",
    ("deadletter_retry", MAIN, "KEYS[3]"): "record",
    ("debounce", MAIN, "KEYS[1]"): "debounce",
    ("debounce", MAIN, "KEYS[4]"): "record",
    ("keeplast", MAIN, "KEYS[rec]"): "record",
    ("keeplast", MAIN, "queue .. ':job:' .. held"): "record",
    ("_flow", "enqueue_follow_up", "rec"): "record",
    ("_flow", "flush_batch", "rec"): "record",
    ("batch", MAIN, "rec"): "record",
    ("drop", MAIN, "KEYS[2]"): "counts",
    ("drop", MAIN, "prefix .. ':cancelled'"): "cancelled",
    ("enqueue", MAIN, "KEYS[2]"): "record",
    ("heartbeat", MAIN, "rec"): "worker",
    ("jobs_move", MAIN, "rec"): "record",
    ("jobs_remove", MAIN, "rec"): "record",
    ("jobs_remove", "needs_cancel", "rec"): "record",
    ("jobs_remove", MAIN, "KEYS[2]"): "counts",
    ("jobs_retry_now", MAIN, "rec"): "record",
    ("limit", "admit_one", "KEYS[rec]"): "record",
    ("park", MAIN, "KEYS[4]"): "record",
    ("periodic", MAIN, "KEYS[1]"): "periodic",
    ("limit_set", MAIN, "KEYS[1]"): "limits",
    ("pause", MAIN, "KEYS[1]"): "paused",
    ("promote", "note_entry", "rec"): "record",
    ("queue_stats", MAIN, "KEYS[9]"): "counts",
    ("requeue", MAIN, "KEYS[2]"): "record",
    ("resume", MAIN, "KEYS[1]"): "paused",
    ("resume", MAIN, "KEYS[3]"): "counts",
    ("resume", MAIN, "rec"): "record",
    ("schedule", MAIN, "KEYS[3]"): "record",
    ("slot", MAIN, "KEYS[#KEYS]"): "counts",
    ("snooze", MAIN, "KEYS[4]"): "record",
    ("slot", MAIN, "KEYS[5]"): "record",
    ("start", MAIN, "rec"): "record",
    ("telemetry_logs", MAIN, "KEYS[2]"): "logsize",
    ("taskstats", MAIN, "KEYS[k]"): "task statistics",
    ("unique", MAIN, "KEYS[rec]"): "record",
    ("watch", MAIN, "KEYS[1]"): "record",
    ("_fair", "fair_weight", "names.weights"): "fair weights",
    ("_fair", "fair_enter", "rec"): "record",
    ("fair_enqueue", MAIN, "KEYS[5]"): "record",
    ("fair_enqueue", "write_record", "KEYS[5]"): "record",
    ("fair_weight", MAIN, "KEYS[1]"): "fair weights",
}
"""Every key of a hash command in the scripts: a job's record, or another hash (the queue's
counts, its pauses and run-time limits, the tombstones of cancelled jobs without a record, a
chord's state, a workflow's record, a worker's heartbeat record, the periodic schedules, a
resumable job's steps, a job's telemetry log counters, a debounce burst, a fair queue's
weights)."""

DYNAMIC = {
    ("fetch", "unpack(ids)"): "XACK",
    ("renew", "unpack(claim)"): "XCLAIM",
    ("tidy", "unpack(done)"): "XDEL",
    ("limit", "unpack(probe)"): "ZCARD, GET and HGET of 'state' (reads)",
}
"""Commands built as a table: what each is (none writes a record)."""

HASH = {"HSET", "HSETNX", "HMSET", "HDEL", "HINCRBY", "HGET", "HMGET", "HGETALL", "HEXISTS"}
WRITES = {"HSET", "HSETNX", "HMSET", "HDEL", "HINCRBY"}


class Access(NamedTuple):
    script: str
    line: int
    command: str
    fields: tuple[str, ...]


def strip_comments(text: str) -> str:
    """The script without ``--`` comments (strings kept as they are)."""
    out, i, quote = [], 0, ""
    while i < len(text):
        c = text[i]
        if quote:
            out.append(c)
            if c == "\\":
                out.append(text[i + 1])
                i += 1
            elif c == quote:
                quote = ""
        elif c in "'\"":
            quote = c
            out.append(c)
        elif text.startswith("--", i):
            i = text.find("\n", i)
            i = len(text) if i < 0 else i
            continue
        else:
            out.append(c)
        i += 1
    return "".join(out)


def call_args(text: str, start: int) -> list[str]:
    """The arguments of the call whose ``(`` is at ``start``, split at top-level commas."""
    args, depth, quote, current = [], 0, "", []
    for i in range(start + 1, len(text)):
        c = text[i]
        if quote:
            if c == quote and text[i - 1] != "\\":
                quote = ""
        elif c in "'\"":
            quote = c
        elif c in "({[":
            depth += 1
        elif c in ")}]":
            if depth == 0:
                args.append("".join(current).strip())
                return [" ".join(a.split()) for a in args]
            depth -= 1
        elif c == "," and depth == 0:
            args.append("".join(current).strip())
            current = []
            continue
        current.append(c)
    raise AssertionError(f"unclosed call at offset {start}")


FUNCTION = re.compile(r"^(?:local )?function (\w+)|^\s+(\w+) = function\b")


def contexts(text: str) -> list[str]:
    """The enclosing function of each line (top-level code is ``<main>``)."""
    current, out = MAIN, []
    for line in text.splitlines():
        m = FUNCTION.match(line)
        if m:
            current = m.group(1) or m.group(2)
        elif re.match(r"^(end|})", line):
            current = MAIN
        out.append(current)
    return out


def field_name(expr: str, where: str) -> str:
    """A field argument as the record table names it."""
    literal = re.fullmatch(r"'([^']*)'|\"([^\"]*)\"", expr)
    if literal:
        return literal.group(1) if literal.group(1) is not None else literal.group(2)
    if re.fullmatch(r"'attempt:' \.\. \w+", expr):
        return record.ATTEMPT_PREFIX + "<n>"
    raise AssertionError(f"{where}: a record field the test cannot read: {expr}")


def hash_fields(command: str, args: list[str], where: str, context: str) -> tuple[str, ...]:
    """The record fields a hash command names (``args`` after the key)."""
    if command in ("HSET", "HMSET"):
        names = args[0::2]
    elif command in ("HSETNX", "HINCRBY", "HGET", "HEXISTS"):
        names = args[:1]
    else:  # HDEL, HMGET, HGETALL
        names = args
    if names and names[-1] == "..." and context == "finish_record":
        names = names[:-1]  # its callers' fields, read at each call
    return tuple(field_name(n, where) for n in names)


CALL = re.compile(r"redis\.p?call\(|(?<!function )\b(finish_record|record_attempt)\(")


def scan(path: Path, seen_keys: set[tuple[str, str, str]]) -> list[Access]:
    """The record accesses of one script."""
    script, text = path.stem, strip_comments(path.read_text())
    lines, found = contexts(text), []
    for m in CALL.finditer(text):
        line = text.count("\n", 0, m.start()) + 1
        where, context = f"{path.name}:{line}", lines[line - 1]
        args = call_args(text, m.end() - 1)
        if m.group(1) == "finish_record":
            extra = tuple(field_name(f, where) for f in args[5::2])  # its field/value pairs
            found.append(Access(script, line, "HSET", (record.STATE, record.FINISHED_MS, *extra)))
            continue
        if m.group(1) == "record_attempt":
            found.append(Access(script, line, "HSET", (record.ATTEMPT_PREFIX + "<n>",)))
            continue
        literal = re.fullmatch(r"'(\w+)'", args[0])
        if not literal:
            assert (script, args[0]) in DYNAMIC, f"{where}: a command the test cannot read"
            seen_keys.add((script, "", args[0]))
            continue
        command = literal.group(1).upper()
        if command not in HASH:
            continue
        key = (script, context, args[1])
        assert key in KEY_KINDS, f"{where}: unclassified hash key {args[1]} (in {context})"
        seen_keys.add(key)
        if KEY_KINDS[key] == "record":
            fields = hash_fields(command, args[2:], where, context)
            found.append(Access(script, line, command, fields))
    return found


def record_accesses() -> tuple[list[Access], set[tuple[str, str, str]]]:
    seen: set[tuple[str, str, str]] = set()
    found = [a for path in sorted(LUA.glob("*.lua")) for a in scan(path, seen)]
    return found, seen


def protocol_fields() -> set[str]:
    """The fields docs/protocol.md's "Status records" table lists."""
    section = PROTOCOL.read_text().split("\n## Status records\n", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| `")]
    return {name for row in rows for name in re.findall(r"`([^`]+)`", row.split("|")[1])}


def test_every_field_a_script_writes_is_in_the_record_module() -> None:
    accesses, _ = record_accesses()
    unknown = {
        (f"{a.script}.lua:{a.line}", f)
        for a in accesses
        if a.command in WRITES
        for f in a.fields
        if f not in record.FIELDS
    }
    assert not unknown, f"record fields not in taskq.record.FIELDS: {sorted(unknown)}"


def test_every_field_a_script_reads_is_in_the_record_module() -> None:
    accesses, _ = record_accesses()
    reads = [a for a in accesses if a.command not in WRITES]
    unknown = {(a.script, f) for a in reads for f in a.fields if f not in record.FIELDS}
    assert not unknown, f"record fields read but not in taskq.record.FIELDS: {sorted(unknown)}"


def test_every_field_of_the_module_is_written_by_a_script() -> None:
    accesses, _ = record_accesses()
    written = {f for a in accesses if a.command in WRITES for f in a.fields}
    assert set(record.FIELDS) - written == set(), "fields no script writes"


def test_the_protocol_table_lists_exactly_the_record_fields() -> None:
    documented = protocol_fields()
    assert set(record.FIELDS) - documented == set(), "fields missing from docs/protocol.md"
    assert documented - set(record.FIELDS) == set(), "documented fields not in taskq.record"


def test_every_classified_key_is_still_in_a_script() -> None:
    # given the scan of every script, when it is done, then no entry of the tables is stale
    _, seen = record_accesses()
    stale = set(KEY_KINDS) - seen
    stale_dynamic = {k for k in DYNAMIC if (k[0], "", k[1]) not in seen}
    assert not stale and not stale_dynamic, f"stale classifications: {stale | stale_dynamic}"


def test_a_record_in_keys_is_documented_in_the_script_header() -> None:
    # A record passed in KEYS is one the script's header names (its KEYS or ARGV lines).
    undocumented = []
    for (script, _context, expr), kind in KEY_KINDS.items():
        if kind != "record" or not expr.startswith("KEYS["):
            continue
        lines = (LUA / f"{script}.lua").read_text().splitlines()
        header = "\n".join(itertools.takewhile(lambda line: line.startswith("--"), lines))
        _, found, keys_and_args = header.partition("-- KEYS:")
        if not found or "record" not in keys_and_args.split("-- Returns", 1)[0]:
            undocumented.append((script, expr))
    assert not undocumented


def test_the_scan_finds_the_writes_it_must() -> None:
    # The scan itself: the writes that end, retry and mark a job are found with their fields.
    accesses, _ = record_accesses()
    by_script = {(a.script, f) for a in accesses if a.command in WRITES for f in a.fields}
    assert ("fetch", record.RESULT) in by_script  # finish_record(..., 'result', ...)
    assert ("_flow", record.CAUSE_ERROR) in by_script
    assert ("park", record.ATTEMPT_PREFIX + "<n>") in by_script  # record_attempt
    assert ("start", record.WORKER) in by_script
