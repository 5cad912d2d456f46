"""Searching a queue's status records (``taskq jobs search``, ``/queues/<queue>/search``)
against a real Redis: records in every state, ended ones too, each filter, SCAN paging,
hostile records, escaping and read-only mode."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

import msgpack
import pytest
import redis
from click.testing import CliRunner
from starlette.testclient import TestClient

from taskq import App
from taskq.cli import main
from taskq.dashboard import asgi
from taskq.errors import ConfigError
from taskq.keys import QueueKeys
from taskq.ops.jobrows import JobFilter
from taskq.ops.recordsearch import Records
from tests import dashboard_tasks
from tests.conftest import wait_until
from tests.dashboard_support import DashboardProcess

pytestmark = pytest.mark.integration

XSS = "<script>alert('xss')</script>"
DAY_MS = 86_400_000
YESTERDAY_MS = 1_780_000_000_000
"""A fixed "yesterday" (2026-05-28): records written by hand carry it."""


def write_record(r: redis.Redis, queue: str, job_id: str, fields: dict[str, Any]) -> None:
    """A record as the scripts leave it (docs/protocol.md, "Status records")."""
    key = QueueKeys(queue).job(job_id)
    r.hset(key, mapping=fields)
    r.pexpire(key, DAY_MS)


def attempt(error_type: str, error: str) -> bytes:
    return msgpack.packb(
        {"error_type": error_type, "error": error, "traceback": "", "worker": "w", "finished_ms": 1}
    )


def ended(r: redis.Redis, job_id: str, state: str, *, error: str = "", ms: int) -> None:
    fields: dict[str, Any] = {
        "state": state, "task": "reports.build", "queue": "tasks", "priority": "normal",
        "args": msgpack.packb([[f"order-{job_id}"], {}]), "enqueued_ms": ms - 1000,
        "finished_ms": ms, "attempts": 1 if error else 0,
    }  # fmt: skip
    if error:
        fields["attempt:1"] = attempt(*error.split(": ", 1))
    write_record(r, "tasks", job_id, fields)


def search(app: App, queue: str = "tasks", state: str = "", **where: str) -> list[str]:
    """Every matching job id, over every page (each page's rows once)."""
    records, cursor, found = Records(app.link, queue), None, []
    while True:
        page = records.page(JobFilter(**where), state=state, cursor=cursor, count=7)
        found += [row.job_id for row in page.rows]
        if page.cursor is None:
            return found
        cursor = page.cursor


@pytest.fixture
def history(dash_app: App, r: redis.Redis) -> dict[str, str]:
    """Jobs in several states: two waiting (real enqueues, one with a script in its
    arguments), one cancelled through its record, and ended ones written as the scripts
    leave them."""
    waiting = dashboard_tasks.show.delay("order-1234")
    hostile = dashboard_tasks.show.delay(XSS)
    cancelled = dashboard_tasks.show.delay("order-77")
    assert cancelled.cancel() == "cancelled"
    ended(r, "ok1", "succeeded", ms=YESTERDAY_MS)
    ended(r, "bad1", "failed", error="TimeoutError: after 30 s", ms=YESTERDAY_MS + 3_600_000)
    ended(r, "bad2", "failed", error="ConnectionError: refused", ms=YESTERDAY_MS + 7_200_000)
    ended(r, "old1", "failed", error="TimeoutError: after 30 s", ms=YESTERDAY_MS - 2 * DAY_MS)
    return {"waiting": waiting.id, "hostile": hostile.id, "cancelled": cancelled.id}


def test_each_filter(dash_app: App, history: dict[str, str]) -> None:
    everything = search(dash_app)
    assert sorted(everything) == sorted([*history.values(), "ok1", "bad1", "bad2", "old1"])
    assert sorted(search(dash_app, state="failed")) == ["bad1", "bad2", "old1"]
    assert search(dash_app, state="cancelled") == [history["cancelled"]]
    assert sorted(search(dash_app, state="waiting")) == sorted(
        [history["waiting"], history["hostile"]]
    )
    assert search(dash_app, args="ORDER-1234") == [history["waiting"]]
    assert sorted(search(dash_app, task="reports")) == ["bad1", "bad2", "ok1", "old1"]
    day = {"since": str(YESTERDAY_MS - 1), "until": str(YESTERDAY_MS + DAY_MS)}
    assert sorted(search(dash_app, state="failed", error="timeout", **day)) == ["bad1"]
    assert search(dash_app, error="connectionerror: ref") == ["bad2"]
    assert search(dash_app, queue="backlog") == []


def test_paging_returns_every_match_once(dash_app: App, r: redis.Redis) -> None:
    for i in range(60):
        ended(r, f"p{i}", "succeeded" if i % 3 else "failed", error="E: boom" * (i % 3 == 0), ms=i)
    r.set(QueueKeys("tasks").job("not-a-hash"), "x")  # another type: passed over
    found = search(dash_app, state="failed")
    assert sorted(found) == sorted(f"p{i}" for i in range(0, 60, 3))
    assert len(found) == len(set(found))


def test_hostile_records_are_passed_over_or_shown_as_text(dash_app: App, r: redis.Redis) -> None:
    write_record(
        r, "tasks", "h1", {"state": "failed", "args": b"\xc1 not msgpack", "attempts": "x"}
    )
    write_record(r, "tasks", "h2", {"state": "succeeded", "finished_ms": "²", "enqueued_ms": "-5"})
    write_record(r, "tasks", "h3", {"state": "failed", "attempts": "2", "attempt:2": b"\xc1"})
    write_record(r, "tasks", "h4", {"task": "no state"})
    write_record(r, "tasks", "bad id", {"state": "failed"})
    rows = {
        row.job_id: row
        for row in Records(dash_app.link, "tasks").page(JobFilter()).rows
    }  # fmt: skip
    assert sorted(rows) == ["h1", "h2", "h3"]
    assert rows["h1"].args == "(unreadable arguments)" and rows["h1"].attempts == 0
    assert rows["h2"].finished_ms is None and rows["h2"].enqueued_ms is None
    assert rows["h3"].error == ""
    assert search(dash_app, since="1") == []  # no time to match


def test_bad_cursor_and_state_are_refused(dash_app: App) -> None:
    records = Records(dash_app.link, "tasks")
    with pytest.raises(ConfigError, match="cursor"):
        records.page(JobFilter(), cursor="1; FLUSHALL")
    with pytest.raises(ConfigError, match="state"):
        records.page(JobFilter(), state="gone")


def test_a_queue_name_with_glob_characters_matches_only_itself(
    dash_app: App, r: redis.Redis
) -> None:
    write_record(r, "a*", "j1", {"state": "succeeded", "task": "t"})
    write_record(r, "ab", "j2", {"state": "succeeded", "task": "t"})
    assert search(dash_app, queue="a*") == ["j1"]


def test_the_page_lists_records_as_text_and_pages_on(
    dash_app: App, r: redis.Redis, history: dict[str, str]
) -> None:
    with TestClient(asgi(dash_app, read_only=True), raise_server_exceptions=False) as client:
        page = client.get("/queues/tasks/search", params={"args": "script"})
        assert page.status_code == 200
        assert XSS not in page.text and "&lt;script&gt;" in page.text
        assert re.findall(r'data-job-id="([^"]*)"', page.text) == [history["hostile"]]
        assert f'href="/jobs/{history["hostile"]}?queue=tasks"' in page.text
        assert re.search(r'data-figure="scanned">7<', page.text)
        assert "script-src 'self'" in page.headers["content-security-policy"]
        assert '<form method="post"' not in page.text  # no action here, read-only or not
        api = client.get("/api/queues/tasks/search", params={"state": "failed", "error": "time"})
        assert sorted(row["job_id"] for row in api.json()["rows"]) == ["bad1", "old1"]
        assert client.get("/queues/tasks/search?cursor=x").status_code == 400
        assert client.get("/queues/elsewhere/search").status_code == 404


def test_cli_search(dash_app: App, redis_url: str, history: dict[str, str]) -> None:
    cmd = ["--redis-url", redis_url, "-A", "tests.dashboard_tasks", "jobs", "search", "tasks"]
    result = CliRunner().invoke(main, [*cmd, "--state", "failed", "--filter", "error=Timeout",
                                       "--since", "2026-05-28T00:00", "--json"])  # fmt: skip
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert [row["job_id"] for row in doc["rows"]] == ["bad1"]
    assert doc["cursor"] is None and doc["scanned"] == 7
    text = CliRunner().invoke(main, [*cmd, "--filter", "args=order-1234"]).stdout
    assert history["waiting"] in text and "read 7 records, 1 matched" in text
    bad = CliRunner().invoke(main, [*cmd, "--cursor", "nope"])
    assert bad.exit_code != 0 and "invalid cursor" in bad.output


def test_browser_searches_by_error_and_shows_arguments_as_text(
    browser: Any, start_dashboard: Callable[..., DashboardProcess], history: dict[str, str]
) -> None:
    from selenium.common.exceptions import NoAlertPresentException
    from selenium.webdriver.common.by import By

    dash = start_dashboard()
    browser.get(f"{dash.url}/queues/tasks/waiting")
    browser.find_element(By.ID, "search-records").click()
    at(browser, "/queues/tasks/search")
    form = browser.find_element(By.ID, "filter")
    form.find_element(By.NAME, "args").send_keys("<script>")
    form.find_element(By.CSS_SELECTOR, "button[type=submit]").click()
    at(browser, "args=%3Cscript%3E")
    row = browser.find_element(By.CSS_SELECTOR, "tr[data-job-id]")
    assert row.get_attribute("data-job-id") == history["hostile"]
    assert XSS in row.text  # shown as text, never run
    with pytest.raises(NoAlertPresentException):
        browser.switch_to.alert.accept()
    assert browser.find_elements(By.CSS_SELECTOR, "main script") == []
    browser.get(f"{dash.url}/queues/tasks/search?state=failed&error=timeout")
    shown = [e.get_attribute("data-job-id") for e in browser.find_elements(By.CSS_SELECTOR, "tr")]
    assert sorted(i for i in shown if i) == ["bad1", "old1"]
    browser.find_element(By.LINK_TEXT, "bad1").click()
    at(browser, "/jobs/bad1?queue=tasks")


def at(browser: Any, part: str) -> None:
    """Wait for the page a click led to (a click returns before the browser loads it)."""
    wait_until(lambda: part in browser.current_url, message=f"a page at {part}")
