"""What a fair queue shows (docs/fairness.md, "Seeing it"): ``app.fair_key``, ``taskq inspect``,
the metrics and the dashboard read the keys fair queues keep, laid out here by hand as
taskq/keys.py documents them; every figure is checked against what Redis holds, and hostile
contents (wrong types, scores and weights that are not counts, huge or binary members) are
skipped or marked, never crash a reader."""

from __future__ import annotations

import asyncio
import html
import json
import re
from collections.abc import Callable
from typing import Any

import pytest
import redis
from click.testing import CliRunner

from taskq import App, FairKey
from taskq.dashboard import asgi
from taskq.fairview import INVALID_WEIGHT, KEY_SHOWN_BYTES, TOP_KEYS
from taskq.keys import PRIORITIES, QueueKeys, partition_names

pytestmark = pytest.mark.integration


def lay_out(r: redis.Redis, queue: str, waiting: dict[Any, float], *, on: bool = True) -> None:
    """A fair queue's keys as its scripts leave them: each key of ``waiting`` in the waiting
    set with that score and, for a score that is a count, that many staged jobs spread over
    the priorities (the j-th in the j-th priority, round), each list's key in its turns."""
    k = QueueKeys(queue)
    if on:
        r.set(k.fair_mode, "on")
    if not waiting:
        return
    r.zadd(k.fair_waiting, waiting)
    pipe = r.pipeline(transaction=False)
    for member, score in waiting.items():
        jobs = int(score) if score == int(score) and score > 0 else 0
        for p in PRIORITIES[: min(jobs, len(PRIORITIES))]:
            pipe.rpush(k.fair_turns(p), member)
        for j in range(jobs):
            pipe.rpush(staged(k, PRIORITIES[j % len(PRIORITIES)], member), b"job")
    pipe.execute()


def staged(k: QueueKeys, priority: str, member: Any) -> bytes:
    """The staged list of a member of any type (bytes, text) in one priority."""
    raw = member if isinstance(member, bytes) else str(member).encode()
    return k.fair_staged(priority, "").encode() + raw


def truth(r: redis.Redis, queue: str) -> dict[bytes, int]:
    """Each member of the waiting set with its staged jobs as Redis holds them (every
    priority), members without any left out."""
    k = QueueKeys(queue)
    counts = {
        m: sum(r.llen(staged(k, p, m)) for p in PRIORITIES) for m in r.zrange(k.fair_waiting, 0, -1)
    }
    return {m: n for m, n in counts.items() if n}


def cli(redis_url: str, *args: str) -> Any:
    from taskq.cli import main

    result = CliRunner().invoke(main, ["--redis-url", redis_url, *args])
    assert result.exit_code == 0, result.output
    return result


def test_fair_key_reads_weight_and_waiting(make_app: Callable[..., App], r: redis.Redis) -> None:
    app = make_app()
    lay_out(r, "tasks", {"a": 1200, "b": 3})
    r.hset(QueueKeys("tasks").fair_weights, "a", 3)
    assert app.fair_key("tasks", "a") == FairKey("a", 3, 1200)
    assert app.fair_key("tasks", "b") == FairKey("b", 1, 3)
    assert app.fair_key("tasks", "nobody") == FairKey("nobody", 1, 0)

    async def read() -> FairKey:
        try:
            return await app.afair_key("tasks", "a")
        finally:
            await app.aclose()

    assert asyncio.run(read()) == FairKey("a", 3, 1200)


def test_fair_key_sums_a_partitioned_queue(make_app: Callable[..., App], r: redis.Redis) -> None:
    app = make_app(partitions={"tasks": 3})
    for i, part in enumerate(partition_names("tasks", 3)):
        lay_out(r, part, {"a": i + 1})
        r.hset(QueueKeys(part).fair_weights, "a", 5)
    assert app.fair_key("tasks", "a") == FairKey("a", 5, 1 + 2 + 3)


def test_fair_key_survives_hostile_contents(make_app: Callable[..., App], r: redis.Redis) -> None:
    app = make_app()
    k = QueueKeys("tasks")
    r.set(k.fair_waiting, "not a set")
    r.hset(k.fair_weights, "a", "heavy")
    assert app.fair_key("tasks", "a") == FairKey("a", INVALID_WEIGHT, 0)
    r.delete(k.fair_waiting, k.fair_weights)
    r.zadd(k.fair_waiting, {"a": 2.5})
    r.set(k.fair_weights, "x")
    assert app.fair_key("tasks", "a") == FairKey("a", 1, 0)
    r.rpush(staged(k, "normal", "a"), b"job", b"job")
    r.set(staged(k, "high", "a"), "not a list")  # hides only itself
    assert app.fair_key("tasks", "a") == FairKey("a", 1, 2)


def test_inspect_shows_active_keys_and_the_top_keys(
    make_app: Callable[..., App], r: redis.Redis, redis_url: str
) -> None:
    # Given: a fair queue with 13 active keys, one of them weighted, one whose score (a bound
    # that admissions do not lower) overstates its jobs, and a plain queue.
    lay_out(r, "tasks", {f"tenant-{i:02d}": 100 + i for i in range(12)})
    lay_out(r, "tasks", {"drained": 2})
    r.zadd(QueueKeys("tasks").fair_waiting, {"drained": 5000})
    r.hset(QueueKeys("tasks").fair_weights, "tenant-11", 3)
    before = cli(redis_url, "inspect", "-Q", "plain").stdout
    # When / then: the text view lists the 10 keys with the most jobs, most first.
    out = cli(redis_url, "inspect", "-Q", "tasks,plain").stdout
    assert "tasks: fair, 13 active key(s), top 10 by waiting jobs:" in out
    rows = [line.split() for line in out.splitlines() if line.startswith("  tenant-")]
    assert rows[0] == ["tenant-11", "111", "3"]
    assert [r_[0] for r_ in rows] == [f"tenant-{i:02d}" for i in range(11, 1, -1)]
    assert all(row[1] == str(truth(r, "tasks")[row[0].encode()]) for row in rows)
    # ... and a queue that is not fair prints as it did.
    assert cli(redis_url, "inspect", "-Q", "plain").stdout == before
    assert "fair" not in before


def test_inspect_json_pages_every_key(r: redis.Redis, redis_url: str) -> None:
    # Given: 2,500 active keys (more than a page: ZSCAN walks the set's hash table).
    waiting = {f"k{i}": i % 7 + 1 for i in range(2500)}
    lay_out(r, "tasks", waiting)
    r.hset(QueueKeys("tasks").fair_weights, mapping={"k1": 2, "k2": 1000})
    # When: following keys_cursor from the first page to the last.
    doc = json.loads(cli(redis_url, "inspect", "-Q", "tasks", "--json").stdout)
    [q] = doc["queues"]
    fair = q["fair"]
    assert fair["on"] is True and fair["active_keys"] == 2500
    assert len(fair["top"]) == TOP_KEYS and all(k["waiting"] == 7 for k in fair["top"])
    seen: dict[str, tuple[int, int]] = {}
    pages = 0
    while True:
        pages += 1
        seen |= {k["key"]: (k["waiting"], k["weight"]) for k in fair["keys"]}
        if fair["keys_cursor"] is None:
            break
        more = cli(
            redis_url, "inspect", "-Q", "tasks", "--json", "--keys-cursor", fair["keys_cursor"]
        )
        fair = json.loads(more.stdout)["queues"][0]["fair"]
    # Then: every key once with its count as Redis holds it, and its weight.
    assert pages >= 2
    assert {k.encode(): n for k, (n, _) in seen.items()} == truth(r, "tasks")
    assert seen["k1"] == (2, 2) and seen["k2"] == (3, 1000) and seen["k3"] == (4, 1)


def test_inspect_keys_cursor_needs_json_and_one_queue(
    make_app: Callable[..., App], r: redis.Redis, redis_url: str
) -> None:
    from taskq.cli import main

    lay_out(r, "tasks", {"a": 1})
    for args in (
        ["-Q", "tasks", "--keys-cursor", "7"],
        ["-Q", "a,b", "--json", "--keys-cursor", "7"],
    ):
        result = CliRunner().invoke(main, ["--redis-url", redis_url, "inspect", *args])
        assert result.exit_code == 2 and "--keys-cursor" in result.output
    bad = ["-Q", "tasks", "--json", "--keys-cursor", "1;DEL x"]
    result = CliRunner().invoke(main, ["--redis-url", redis_url, "inspect", *bad])
    assert result.exit_code == 2 and "not a cursor" in result.output


def hostile(r: redis.Redis) -> None:
    """Fair queues whose keys hold what their scripts never write."""
    # wrong types at every key of one queue
    k = QueueKeys("wrong")
    r.hset(k.fair_mode, "x", 1)
    r.set(k.fair_waiting, "not a set")
    r.set(k.fair_weights, "not a hash")
    # scores that are not counts, weights that are not weights, huge and binary members
    lay_out(r, "odd", {"frac": 2.5, "neg": -3, "zero": 0, "huge": 9, "bin": 8, "esc": 7})
    big = b"H" * (KEY_SHOWN_BYTES * 50)
    lay_out(r, "odd", {big: 6, b"\xff\xfe": 5, "\x1b[2Jx\n": 4})
    r.hset(QueueKeys("odd").fair_weights, mapping={"huge": "9999", "bin": "abc", "esc": "-1"})


def test_hostile_contents_are_skipped_or_marked(r: redis.Redis, redis_url: str) -> None:
    hostile(r)
    out = cli(redis_url, "inspect", "-Q", "wrong,odd").stdout
    assert "wrong: fair" not in out  # a mode that is not a string, a set that is not a set
    assert "odd: fair, 9 active key(s), top 6 by waiting jobs:" in out
    assert "\x1b" not in out and "\\x1b[2Jx\\n" in out
    rows = {line.split()[0]: line.split()[1:] for line in out.splitlines() if line[:3] == "  H"}
    assert rows == {"H" * 79 + "…": ["6", "1"]}  # cut in the text view
    assert "  huge " in out and [ln.split() for ln in out.splitlines() if "  huge " in ln] == [
        ["huge", "9", "invalid"]
    ]
    doc = json.loads(cli(redis_url, "inspect", "-Q", "wrong,odd", "--json").stdout)
    wrong, odd = doc["queues"]
    assert wrong["fair"] is None
    keys = {k["key"]: (k["waiting"], k["weight"]) for k in odd["fair"]["keys"]}
    assert keys["huge"] == (9, INVALID_WEIGHT) and keys["bin"] == (8, INVALID_WEIGHT)
    assert keys["esc"] == (7, INVALID_WEIGHT) and keys["\ufffd\ufffd"] == (5, 1)
    assert keys["H" * KEY_SHOWN_BYTES + "…"] == (6, 1)
    assert not {"frac", "neg", "zero"} & set(keys)


def scrape(redis_url: str, queues: list[str]) -> dict[tuple[str, frozenset[Any]], float]:
    """The queue metrics as a scrape reads them: exposed as text, then parsed."""
    pytest.importorskip("prometheus_client")
    from prometheus_client import CollectorRegistry, generate_latest
    from prometheus_client.parser import text_string_to_metric_families

    from taskq.ops.queue_metrics import QueueDepth

    registry = CollectorRegistry()
    registry.register(QueueDepth(redis_url, queues))
    exposed = generate_latest(registry).decode()
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(exposed)
        for s in family.samples
        if s.name.startswith("taskq_fair_")
    }


def test_metrics_show_active_keys_and_top_keys_escaped(r: redis.Redis, redis_url: str) -> None:
    # Given: a fair queue whose keys hold quotes, backslashes and new lines, and hostile ones.
    nasty = 'a"b\\c\nd} x{y="z"'
    lay_out(r, "tasks", {nasty: 50, **{f"t{i}": i + 1 for i in range(12)}})
    hostile(r)
    samples = scrape(redis_url, ["tasks", "plain", "wrong", "odd"])
    # Then: the figures are Redis's, the label values come back as they were.
    assert samples[("taskq_fair_active_keys", frozenset({("queue", "tasks")}))] == 13
    held = truth(r, "tasks")
    expected = sorted(held.items(), key=lambda kv: -kv[1])[:TOP_KEYS]  # (counts all differ)
    tasks_tops = {
        dict(lb)["key"]: v
        for (name, lb), v in samples.items()
        if name == "taskq_fair_key_waiting" and dict(lb)["queue"] == "tasks"
    }
    assert tasks_tops == {m.decode(): float(n) for m, n in expected}
    assert tasks_tops[nasty] == 50
    queues = {dict(lb)["queue"] for (_, lb) in samples}
    assert queues == {"tasks", "odd"}  # plain and wrong are not fair


XSS = "<script>alert('key')</script>"


def test_dashboard_queue_page_shows_the_fair_keys_escaped(dash_app: App, r: redis.Redis) -> None:
    from starlette.testclient import TestClient

    # Given: the backlog queue fair, with a key that is markup among 14 active keys.
    lay_out(r, "backlog", {XSS: 40, **{f"t{i}": i + 1 for i in range(13)}})
    r.hset(QueueKeys("backlog").fair_weights, mapping={XSS: 7, "t12": "junk"})
    with TestClient(asgi(dash_app), raise_server_exceptions=False) as client:
        page = client.get("/queues/backlog/waiting")
        doc = client.get("/api/queues/backlog/waiting").json()
        plain = client.get(f"/queues/{dash_app.settings.queue}/waiting").text
    # Then: the figures are Redis's, the key is text, the security headers stand.
    assert page.status_code == 200
    assert "script-src 'self'" in page.headers["content-security-policy"]
    text = page.text
    assert "<script>alert" not in text and "&lt;script&gt;alert(" in text
    assert re.search(r'data-figure="active-keys">14<', text)
    rows = re.findall(
        r'<tr data-fair-key="([^"]*)">.*?"key-waiting">(\d+)<.*?"key-weight">(\w+)<', text
    )
    held = truth(r, "backlog")
    expected = sorted(held.items(), key=lambda kv: -kv[1])[:TOP_KEYS]  # (counts all differ)
    assert [(html.unescape(k), int(n)) for k, n, _ in rows] == [
        (m.decode(), n) for m, n in expected
    ]
    assert rows[0][2] == "7" and rows[1][2] == "invalid" and rows[2][2] == "1"
    assert doc["fair"]["active_keys"] == 14 and doc["fair"]["top"][0] == {
        "key": XSS,
        "weight": 7,
        "waiting": 40,
    }
    assert 'id="fair"' not in plain  # a queue that is not fair shows no such section
