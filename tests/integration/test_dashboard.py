"""The web dashboard against a real Redis: routes, figures, auth, CSRF, read-only, escaping
and mounting through Starlette's TestClient; then end to end in headless Chromium with a
real ``taskq worker`` and a real ``taskq dashboard`` process."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from click.testing import CliRunner
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.routing import Mount
from starlette.testclient import TestClient

from taskq import App
from taskq.broker.series import MINUTE_MS, Series, minute_of
from taskq.dashboard import asgi
from taskq.errors import ConfigError
from taskq.ops.throughput import last_hour
from taskq.worker.outcome import JobCounts
from taskq.worker.throughput import ThroughputWriter
from tests import dashboard_tasks
from tests.conftest import WorkerProcess, wait_until
from tests.dashboard_support import (
    DashboardProcess,
    add_deadletter,
    post,
)
from tests.redis_server import free_port

pytestmark = pytest.mark.integration

XSS = "<script>alert('xss')</script>"


def csrf_of(html: str) -> str:
    found = re.search(r'name="csrf" value="([^"]+)"', html)
    assert found, "the page has no form with a CSRF token"
    return found.group(1)


def inspect_json(redis_url: str) -> Any:
    from taskq.cli import main

    args = ["--redis-url", redis_url, "-A", "tests.dashboard_tasks", "inspect", "--json"]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def without_clock(doc: Any) -> Any:
    """The document less what moves with the clock (ages, now)."""
    if isinstance(doc, dict):
        return {
            k: without_clock(v)
            for k, v in doc.items()
            if not k.endswith(("age_ms", "now_ms", "_in_ms", "expires_in_ms"))
        }
    if isinstance(doc, list):
        return [without_clock(v) for v in doc]
    return doc


# -- figures ---------------------------------------------------------------------------------


def test_overview_json_is_inspect_json(
    client: TestClient, dash_app: App, r: redis.Redis, redis_url: str
) -> None:
    # Given: waiting jobs on two queues, a delayed one and a dead letter.
    for n in range(3):
        dashboard_tasks.later.delay(n)
    dashboard_tasks.show.delay(1)
    dashboard_tasks.show.apply_async((2,), countdown=3600)
    add_deadletter(r, dash_app, "x")
    # When / then: the dashboard's JSON is inspect's, figure for figure.
    doc = client.get("/api/overview").json()
    assert without_clock({k: v for k, v in doc.items() if k != "throughput"}) == without_clock(
        inspect_json(redis_url)
    )
    queues = {q["queue"]: q for q in doc["queues"]}
    assert (queues["backlog"]["waiting"], queues["tasks"]["waiting"]) == (3, 1)
    assert (queues["tasks"]["scheduled"], queues["tasks"]["dead"]) == (1, 1)
    # and the page shows the same numbers.
    html = client.get("/").text
    section = html.split('data-queue="backlog"')[1].split("</section>")[0]
    assert '<span class="n" data-figure="waiting">3</span>' in section


def test_series_buckets_count_each_job_once(dash_app: App) -> None:
    series = Series(dash_app.link)
    writer, queues = ThroughputWriter("w1"), ["tasks", "backlog"]
    writer.write(series, queues, JobCounts(processed=5, failed=2, retried=1, dead=1))
    writer.write(series, queues, JobCounts(processed=7, failed=2, retried=1, dead=1))  # 1 minute
    ThroughputWriter("w2").write(series, ["tasks"], JobCounts(processed=1))
    t = last_hour(series, ["tasks", "backlog"])
    assert len(t.minutes) == 60 and t.minutes[-1].start_ms == minute_of(t.now_ms)
    assert (t.processed, t.failed) == (8, 2)  # w1 counted once although it serves two queues
    ttl = dash_app.link.call("PTTL", f"tasks:series:{minute_of(t.now_ms)}")
    assert 0 < int(ttl) <= 2 * 3_600_000
    assert t.minutes[-1].start_ms - t.minutes[0].start_ms == 59 * MINUTE_MS


# -- pages and bad input ---------------------------------------------------------------------


def test_every_page_answers(client: TestClient, dash_app: App, r: redis.Redis) -> None:
    job = dashboard_tasks.show.delay(1)
    dead_id, _ = add_deadletter(r, dash_app, "fragile")
    for path in (
        "/",
        "/workers",
        f"/jobs/{job.id}",
        "/deadletters",
        f"/deadletters/tasks/{dead_id}",
        "/periodic",
        "/?part=live",
        "/api/workers",
        f"/api/jobs/{job.id}",
        "/api/deadletters",
    ):
        response = client.get(path)
        assert response.status_code == 200, (path, response.text[:500])
    assert "hourly_report" in client.get("/periodic").text
    found = client.get("/jobs", params={"id": f" {job.id} "}, follow_redirects=False)
    assert found.headers["location"] == f"/jobs/{job.id}"
    assert client.get("/?part=live").text.lstrip().startswith("<section")


def test_a_workflow_page_lists_its_steps(client: TestClient) -> None:
    from taskq.canvas import chain

    flow = chain(dashboard_tasks.show.s(1), dashboard_tasks.show.s()).apply_async()
    page = client.get(f"/jobs/{flow.id}")
    assert page.status_code == 200 and "chain" in page.text
    assert page.text.count('class="state') == 2 and "Cancel workflow" in page.text
    assert [s["state"] for s in client.get(f"/api/jobs/{flow.id}").json()["steps"]] == [
        "waiting",
        "pending",
    ]


def test_a_job_without_record_is_seen_from_its_entry(client: TestClient, dash_app: App) -> None:
    dash_app.broker_for(["backlog"]).ensure_groups()  # as a worker does
    job = dashboard_tasks.later.delay(1)  # keeps no record
    assert client.get(f"/jobs/{job.id}").status_code == 404
    page = client.get(f"/jobs/{job.id}", params={"at": f"backlog:normal/{job.entry_id}"})
    assert page.status_code == 200 and 'id="job-state">waiting<' in page.text
    bad = client.get(f"/jobs/{job.id}", params={"at": "backlog:urgent/1-0"})
    assert bad.status_code == 400 and "unknown priority" in bad.text


def test_the_live_view_streams_a_jobs_telemetry_as_server_sent_events(
    client: TestClient, dash_app: App
) -> None:
    from taskq.testing import drain

    job = dashboard_tasks.narrates.delay(3, 0.0)
    drain(dash_app)
    response = client.get(f"/live/{job.id}")
    assert response.headers["content-type"].startswith("text/event-stream")
    events = [e for e in response.text.split("\n\n") if e.startswith("event:")]
    kinds = [e.split("\n")[0] for e in events]
    assert kinds == ["event: progress", *["event: log"] * 3, *["event: chunk"] * 3, "event: end"]
    chunk = events[4].split("\n")
    assert chunk[1].startswith("id: ") and json.loads(chunk[2][len("data: ") :]) == {
        "id": chunk[1][len("id: ") :],
        "attempt": 1,
        "text": "<b class=injected>chunk 0</b>",
    }
    assert json.loads(events[-1].split("\n")[1][len("data: ") :]) == {"state": "succeeded"}
    # A reconnecting browser names the last chunk it got: only the rest comes.
    last = chunk[1][len("id: ") :]
    again = client.get(f"/live/{job.id}", headers={"last-event-id": last}).text
    assert again.count("event: chunk") == 2
    assert client.get("/live/<b>x</b>").status_code == 400


@pytest.mark.parametrize(
    ("path", "status", "text"),
    [
        ("/jobs/0123456789abcdef0123456789abcdef", 404, "no record of job"),
        ("/jobs/" + "x" * 300, 400, "invalid job id"),
        ("/deadletters?queue=a:b", 400, "invalid queue name"),
        ("/deadletters?queue=nope", 404, "is not one of"),
        ("/deadletters?before=zzz", 400, "invalid cursor"),
        ("/deadletters/tasks/999-1", 404, "no dead-lettered job"),
        ("/deadletters/tasks/not-an-id", 400, "invalid dead-letter id"),
        ("/api/jobs/0123456789abcdef0123456789abcdef", 404, "no record of job"),
        ("/nowhere", 404, "Not found"),
    ],
)
def test_bad_input_gets_a_clear_error(
    client: TestClient, path: str, status: int, text: str
) -> None:
    response = client.get(path)
    assert response.status_code == status
    assert text in response.text and "Traceback" not in response.text


def test_unreachable_redis_is_a_503_page() -> None:
    app = App(f"redis://127.0.0.1:{free_port()}/0")
    with TestClient(asgi(app), raise_server_exceptions=False) as c:
        for path in ("/", "/workers", "/deadletters", "/api/overview"):
            response = c.get(path)
            assert response.status_code == 503 and "cannot reach Redis" in response.text


def test_arguments_and_errors_are_escaped(
    client: TestClient, dash_app: App, r: redis.Redis
) -> None:
    job = dashboard_tasks.show.delay(XSS)
    dead_id, _ = add_deadletter(r, dash_app, XSS, args=(XSS,), error=XSS)
    for path in (f"/jobs/{job.id}", "/deadletters", f"/deadletters/tasks/{dead_id}"):
        html = client.get(path).text
        assert "<script>alert" not in html, path
        assert "&lt;script&gt;alert(" in html, path
    assert "script-src 'self'" in client.get("/").headers["content-security-policy"]


# -- dead letters ----------------------------------------------------------------------------


def test_deadletters_are_paged_and_searched(
    client: TestClient, dash_app: App, r: redis.Redis
) -> None:
    ids = [add_deadletter(r, dash_app, f"task{n % 3}", error=f"err{n}")[0] for n in range(120)]
    first = client.get("/deadletters").text
    shown = re.findall(r'data-dead-id="([^"]+)"', first)
    assert shown == ids[::-1][:50]  # newest first
    cursor = re.search(r"before=([0-9-]+)", first)
    assert cursor is not None
    second = client.get(f"/deadletters?before={cursor.group(1)}").text
    assert re.findall(r'data-dead-id="([^"]+)"', second) == ids[::-1][50:100]
    found = client.get("/deadletters?task=task1&error=err1").text
    matching = [i for n, i in enumerate(ids) if n % 3 == 1 and "err1" in f"err{n}"]
    assert re.findall(r'data-dead-id="([^"]+)"', found) == matching[::-1]


def test_retry_and_purge_need_the_csrf_token(
    client: TestClient, dash_app: App, r: redis.Redis
) -> None:
    dead_id, _ = add_deadletter(r, dash_app, "fragile", args=("a",))
    add_deadletter(r, dash_app, "fragile", args=("b",))
    page = client.get("/deadletters")
    token = csrf_of(page.text)
    # Without the token (or with another), refused.
    assert client.post("/deadletters/tasks/retry", data={"ids": dead_id}).status_code == 403
    bad = {"ids": dead_id, "csrf": "x" * 43}
    assert client.post("/deadletters/tasks/retry", data=bad).status_code == 403
    assert r.xlen("tasks:deadletter") == 2
    # With it: moved back to its stream.
    ok = client.post(
        "/deadletters/tasks/retry", data={"ids": dead_id, "csrf": token}, follow_redirects=False
    )
    assert ok.status_code == 303 and "re-enqueued+1" in ok.headers["location"]
    assert r.xlen("tasks:deadletter") == 1 and r.xlen("tasks:normal") == 1
    purged = client.post("/deadletters/tasks/purge", data={"csrf": token}, follow_redirects=False)
    assert purged.status_code == 303 and r.xlen("tasks:deadletter") == 0


def test_a_forged_csrf_pair_is_refused(client: TestClient, dash_app: App, r: redis.Redis) -> None:
    """A page on another port of the host can set cookies, so a cookie equal to the form
    field proves nothing: the token must be made, under the dashboard's secret, for the
    session cookie the request carries."""
    add_deadletter(r, dash_app, "fragile")
    forged = "f" * 43
    for name in ("taskq_csrf", "taskq_session"):
        client.cookies.set(name, forged)
    purge = "/deadletters/tasks/purge"
    assert client.post(purge, data={"csrf": forged}).status_code == 403
    # A real token is worthless with another session, or for another dashboard.
    token = csrf_of(client.get("/deadletters").text)  # for the session "fff...f"
    client.cookies.set("taskq_session", "g" * 43)
    assert client.post(purge, data={"csrf": token}).status_code == 403
    client.cookies.set("taskq_session", forged)
    with TestClient(asgi(dash_app), cookies={"taskq_session": forged}) as other:
        assert other.post(purge, data={"csrf": token}).status_code == 403
    assert r.xlen("tasks:deadletter") == 1
    assert client.post(purge, data={"csrf": token}, follow_redirects=False).status_code == 303
    assert r.xlen("tasks:deadletter") == 0


@pytest.mark.parametrize(
    ("headers", "status"),
    [
        ({"origin": "http://127.0.0.1:1"}, 403),
        ({"origin": "null"}, 403),
        ({"sec-fetch-site": "same-site"}, 403),
        ({"sec-fetch-site": "cross-site"}, 403),
        ({"sec-fetch-site": "same-site", "origin": "http://testserver"}, 403),
        ({"origin": "http://testserver"}, 303),
        ({"sec-fetch-site": "same-origin", "origin": "http://testserver"}, 303),
        ({}, 303),  # not a browser: the token decides
    ],
)
def test_posts_must_come_from_the_dashboards_origin(
    client: TestClient, dash_app: App, r: redis.Redis, headers: dict[str, str], status: int
) -> None:
    add_deadletter(r, dash_app, "fragile")
    token = csrf_of(client.get("/deadletters").text)
    response = client.post(
        "/deadletters/tasks/purge", data={"csrf": token}, headers=headers, follow_redirects=False
    )
    assert response.status_code == status, response.text
    assert r.xlen("tasks:deadletter") == (1 if status == 403 else 0)


def test_only_the_dashboards_own_notices_are_shown(
    client: TestClient, dash_app: App, r: redis.Redis
) -> None:
    lure = "Session expired: log in again at evil.example"
    for path in ("/", "/workers", "/deadletters", "/periodic"):
        page = client.get(path, params={"notice": lure, "sig": "x"})
        assert page.status_code == 200 and "evil.example" not in page.text, path
    # An action's own notice is shown.
    add_deadletter(r, dash_app, "fragile")
    token = csrf_of(client.get("/deadletters").text)
    done = client.post("/deadletters/tasks/purge", data={"csrf": token})
    assert '<p class="notice" id="notice">deleted 1 dead-lettered job(s)</p>' in done.text


def test_retry_all_matching(client: TestClient, dash_app: App, r: redis.Redis) -> None:
    for n in range(4):
        add_deadletter(r, dash_app, "fragile", error="timeout" if n % 2 else "refused")
    token = csrf_of(client.get("/deadletters?error=timeout").text)
    form = {"all": "1", "error": "timeout", "csrf": token}
    client.post("/deadletters/tasks/retry", data=form)
    assert r.xlen("tasks:deadletter") == 2 and r.xlen("tasks:normal") == 2


def test_read_only_hides_actions_and_refuses_posts(dash_app: App, r: redis.Redis) -> None:
    dead_id, _ = add_deadletter(r, dash_app, "fragile")
    with TestClient(asgi(dash_app, read_only=True)) as c:
        html = c.get("/deadletters").text + c.get(f"/deadletters/tasks/{dead_id}").text
        assert '<form method="post"' not in html and "read-only" in html
        token = c.cookies.get("taskq_csrf") or ""
        for path in ("/deadletters/tasks/retry", "/deadletters/tasks/purge", "/cancel/abc"):
            response = c.post(path, data={"ids": dead_id, "csrf": token})
            assert response.status_code == 403 and "read-only" in response.text
    assert r.xlen("tasks:deadletter") == 1


def test_cancel_from_the_job_page(client: TestClient, dash_app: App) -> None:
    job = dashboard_tasks.show.apply_async((1,), countdown=3600)
    page = client.get(f"/jobs/{job.id}").text
    assert "Cancel job" in page
    client.post(f"/cancel/{job.id}", data={"csrf": csrf_of(page), "queue": "tasks"})
    assert job.status().state == "cancelled"


# -- access ----------------------------------------------------------------------------------


def test_token_login(dash_app: App) -> None:
    with TestClient(asgi(dash_app, token="s3cret")) as c:
        assert c.get("/").status_code == 401
        assert c.get("/", headers={"Authorization": "Bearer s3cret"}).status_code == 200
        assert c.get("/?token=wrong").status_code == 401
        login = c.get("/workers?token=s3cret", follow_redirects=False)
        assert login.status_code == 303 and login.headers["location"] == "/workers"
        assert "s3cret" not in login.headers["set-cookie"]
        assert c.get("/workers").status_code == 200  # the cookie


@pytest.mark.parametrize("path", ["//evil.example/", "/\\evil.example/", "///evil.example/x"])
def test_token_login_stays_on_the_dashboard(dash_app: App, path: str) -> None:
    with TestClient(asgi(dash_app, token="s3cret")) as c:
        login = c.get(f"http://testserver{path}?token=s3cret&a=1", follow_redirects=False)
        assert login.status_code == 303
        location = login.headers["location"]
        assert location.startswith("/") and location[1:2] not in ("/", "\\"), location


def test_basic_auth(dash_app: App) -> None:
    with TestClient(asgi(dash_app, basic_auth="ops:pw")) as c:
        refused = c.get("/")
        assert refused.status_code == 401 and "Basic" in refused.headers["www-authenticate"]
        assert c.get("/", auth=("ops", "nope")).status_code == 401
        assert c.get("/", auth=("ops", "pw")).status_code == 200


@pytest.mark.parametrize("pair", ["ops:", ":pw", "ops"])
def test_basic_auth_needs_a_user_and_a_password(dash_app: App, pair: str) -> None:
    with pytest.raises(ConfigError, match="USER:PASSWORD"):
        asgi(dash_app, basic_auth=pair)


def test_auth_callable_and_prefix_mount(dash_app: App) -> None:
    async def only_admins(request: Request) -> bool:
        return request.headers.get("x-user") == "admin"

    parent = Starlette(routes=[Mount("/ops/queues", app=asgi(dash_app, auth=only_admins))])
    with TestClient(parent) as c:
        assert c.get("/ops/queues/").status_code == 401
        html = c.get("/ops/queues/", headers={"x-user": "admin"}).text
        assert 'href="/ops/queues/workers"' in html
        assert 'href="/ops/queues/static/dashboard.css"' in html
        css = c.get("/ops/queues/static/dashboard.css", headers={"x-user": "admin"})
        assert css.status_code == 200


def test_prefix(dash_app: App) -> None:
    with TestClient(asgi(dash_app, prefix="/taskq/")) as c:
        html = c.get("/taskq/").text
        assert 'href="/taskq/deadletters"' in html
        assert c.get("/taskq/static/dashboard.js").status_code == 200
        assert c.get("/").status_code == 404


# -- in a real browser -------------------------------------------------------------------------
# headless Chromium (Debian's chromium + chromium-driver, which .ci/run installs) through
# Selenium, against `taskq dashboard` and `taskq worker` subprocesses.


def after_navigation(browser: Any, by: str, selector: str) -> Any:
    """The element once the page a click led to shows it: a click that submits a form returns
    before the browser has loaded the answer, so an immediate lookup may still see the old page."""
    return wait_until(
        lambda: next(iter(browser.find_elements(by, selector)), None),
        message=f"the page to show {selector}",
    )


FIGURES_JS = """
const section = document.querySelector('section[data-queue="' + arguments[0] + '"]');
const tiles = {}, rows = {};
section.querySelectorAll('.tile [data-figure]').forEach(e => {
  tiles[e.dataset.figure] = parseInt(e.textContent, 10);
});
section.querySelectorAll('tr[data-priority]').forEach(row => {
  const cells = {};
  row.querySelectorAll('[data-figure]').forEach(c => { cells[c.dataset.figure] = c.textContent; });
  rows[row.dataset.priority] = cells;
});
return {tiles: tiles, rows: rows};
"""


def figures(browser: Any, queue: str) -> dict[str, Any]:
    """The numbers the overview shows for one queue: its tiles, and per priority its row
    (read in one script, so a live refresh cannot swap the page in the middle)."""
    found: dict[str, Any] = browser.execute_script(FIGURES_JS, queue)
    return found


def test_browser_overview_matches_inspect_and_updates_live(
    browser: Any,
    start_dashboard: Callable[..., DashboardProcess],
    start_worker: Callable[..., WorkerProcess],
    dash_app: App,
    r: redis.Redis,
    redis_url: str,
) -> None:
    from selenium.webdriver.common.by import By

    # Given: a worker on "tasks"; waiting jobs on "backlog", which no worker serves; a
    # delayed job; a job that died.
    start_worker("-A", "tests.dashboard_tasks", "-Q", "tasks", "-c", "1")
    r.set(dashboard_tasks.BROKEN, 1)
    dashboard_tasks.fragile.delay("a")
    for n in range(5):
        dashboard_tasks.later.delay(n)
    dashboard_tasks.later.apply_async((9,), priority="high")
    dashboard_tasks.show.apply_async((1,), countdown=3600)
    wait_until(lambda: r.xlen("tasks:deadletter") == 1, message="the dead job")
    dash = start_dashboard()
    # When: the overview is open.
    browser.get(dash.url + "/")
    # Then: its numbers are inspect's.
    truth = {q["queue"]: q for q in inspect_json(redis_url)["queues"]}
    for queue in ("tasks", "backlog"):
        shown = figures(browser, queue)
        for name in ("waiting", "pending", "retrying", "scheduled", "held", "dead", "expired"):
            assert shown["tiles"][name] == truth[queue][name], (queue, name)
        for s in truth[queue]["streams"]:
            row = shown["rows"][s["priority"]]
            assert (int(row["waiting"]), int(row["pending"])) == (s["waiting"], s["pending"])
            assert row["lag"] == ("-" if s["lag"] is None else str(s["lag"]))
    assert figures(browser, "backlog")["rows"]["high"]["waiting"] == "1"
    # and they follow Redis without a reload: two more jobs, and the worker's failed run
    # reaches the chart through its per-minute bucket.
    dashboard_tasks.later.delay(10)
    dashboard_tasks.later.delay(11)
    wait_until(lambda: figures(browser, "backlog")["tiles"]["waiting"] == 8, message="live")
    caption = browser.find_element(By.CSS_SELECTOR, ".chart figcaption").text
    assert "1 failed" in caption, caption
    assert browser.find_element(By.ID, "live-status").text.startswith("live")


def test_browser_dead_job_retried_from_its_page_runs(
    browser: Any,
    start_dashboard: Callable[..., DashboardProcess],
    start_worker: Callable[..., WorkerProcess],
    dash_app: App,
    r: redis.Redis,
) -> None:
    from selenium.webdriver.common.by import By

    # Given: a job that died while its dependency was broken, then the dependency fixed.
    start_worker("-A", "tests.dashboard_tasks", "-Q", "tasks", "-c", "1")
    r.set(dashboard_tasks.BROKEN, 1)
    job = dashboard_tasks.fragile.delay("b")
    wait_until(lambda: job.status().state == "failed", message="the job to die")
    r.delete(dashboard_tasks.BROKEN)
    dash = start_dashboard()
    # When: it is retried from its page.
    browser.get(dash.url + "/deadletters")
    row = browser.find_element(By.CSS_SELECTOR, "#deadletters tr[data-dead-id]")
    assert "downstream is broken (b)" in row.text
    row.find_element(By.CSS_SELECTOR, "td a").click()
    traceback = after_navigation(browser, By.CSS_SELECTOR, "pre.traceback").text
    assert "RuntimeError: downstream is broken (b)" in traceback
    browser.find_element(By.ID, "retry").click()
    # Then: it runs, succeeds, and is gone from the list.
    assert "re-enqueued 1 job(s)" in after_navigation(browser, By.ID, "notice").text
    assert job.result(timeout=10) == "fixed b"
    browser.get(dash.url + "/deadletters")
    assert browser.find_elements(By.ID, "no-deadletters")
    browser.get(f"{dash.url}/jobs/{job.id}")
    assert browser.find_element(By.ID, "job-state").text == "succeeded"
    assert browser.find_element(By.ID, "job-result").text == "'fixed b'"


def test_browser_xss_job_renders_as_text(
    browser: Any,
    start_dashboard: Callable[..., DashboardProcess],
    start_worker: Callable[..., WorkerProcess],
    dash_app: App,
) -> None:
    from selenium.common.exceptions import NoAlertPresentException
    from selenium.webdriver.common.by import By

    start_worker("-A", "tests.dashboard_tasks", "-Q", "tasks", "-c", "1")
    job = dashboard_tasks.show.delay(XSS)
    assert job.result(timeout=10) == XSS
    dash = start_dashboard()
    browser.get(f"{dash.url}/jobs/{job.id}")
    assert XSS in browser.find_element(By.ID, "job-args").text
    assert XSS in browser.find_element(By.ID, "job-result").text
    with pytest.raises(NoAlertPresentException):
        browser.switch_to.alert.accept()
    assert browser.find_elements(By.CSS_SELECTOR, "main script") == []


def test_browser_read_only_and_csrf(
    browser: Any,
    start_dashboard: Callable[..., DashboardProcess],
    dash_app: App,
    r: redis.Redis,
) -> None:
    from selenium.webdriver.common.by import By

    dead_id, _ = add_deadletter(r, dash_app, "fragile", args=("c",))
    post_without_token = (
        "const done = arguments[arguments.length - 1];"
        "fetch(arguments[0], {method: 'POST', credentials: 'same-origin',"
        " headers: {'content-type': 'application/x-www-form-urlencoded'},"
        " body: 'ids=' + arguments[1]}).then(r => done(r.status));"
    )
    # The full dashboard: actions shown, but a POST without the page's token is refused.
    full = start_dashboard()
    browser.get(f"{full.url}/deadletters/tasks/{dead_id}")
    assert browser.find_elements(By.CSS_SELECTOR, "form[method=post]")
    url = f"{full.url}/deadletters/tasks/retry"
    assert browser.execute_async_script(post_without_token, url, dead_id) == 403
    assert post(url, f"ids={dead_id}".encode()) == 403
    # Read-only: no action on any page, and the same POST with a valid token is refused.
    ro = start_dashboard("--read-only")
    for path in ("/deadletters", f"/deadletters/tasks/{dead_id}", "/"):
        browser.get(ro.url + path)
        assert browser.find_elements(By.CSS_SELECTOR, "form[method=post]") == [], path
    assert browser.find_element(By.CSS_SELECTOR, ".mode").text == "read-only"
    cookie = browser.get_cookie("taskq_session")
    assert cookie is not None
    headers = {"Cookie": f"taskq_session={cookie['value']}"}
    body = f"ids={dead_id}&csrf={cookie['value']}".encode()
    assert post(f"{ro.url}/deadletters/tasks/retry", body, headers) == 403
    assert r.xlen("tasks:deadletter") == 1


ATTACK_PAGE = """<!doctype html><meta charset="utf-8"><title>prize</title>
<form id="f" method="post" action="{action}"><input name="csrf" value="{token}"></form>
<script>
document.cookie = "taskq_session={session}; path=/";
document.cookie = "taskq_csrf={token}; path=/";
document.getElementById("f").submit();
</script>"""


@pytest.fixture
def other_port_page() -> Iterator[Callable[[str], str]]:
    """Serves one page from another port of 127.0.0.1 (the same site as the dashboard, not
    the same origin); returns a function that sets the page and gives its URL."""
    import http.server
    import threading

    page = {"html": ""}

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = page["html"].encode()
            self.send_response(200)
            self.send_header("content-type", "text/html; charset=utf-8")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()

    def serve(html: str) -> str:
        page["html"] = html
        return f"http://127.0.0.1:{server.server_address[1]}/?n={os.urandom(4).hex()}"

    yield serve
    server.shutdown()
    server.server_close()
    thread.join(5)


def session_and_token(url: str) -> tuple[str, str]:
    """What a client that reaches the dashboard gets from a page: its session cookie and
    the token made for it."""
    import urllib.request

    with urllib.request.urlopen(url, timeout=5) as response:
        html = response.read().decode()
        cookies = response.headers.get_all("set-cookie") or []
    token = csrf_of(html)
    found = [c.split(";")[0].split("=", 1)[1] for c in cookies if c.startswith("taskq_session=")]
    return (found[0] if found else token), token


def test_browser_post_from_another_port_is_refused(
    browser: Any,
    start_dashboard: Callable[..., DashboardProcess],
    other_port_page: Callable[[str], str],
    dash_app: App,
    r: redis.Redis,
) -> None:
    from selenium.webdriver.common.by import By

    # Given: dead letters, and a page on another port of 127.0.0.1 that sets the dashboard's
    # cookies and posts its purge form, first with a made-up token, then with a session and
    # token it fetched from the dashboard itself.
    for n in range(3):
        add_deadletter(r, dash_app, "fragile", args=(n,))
    dash = start_dashboard()
    action = f"{dash.url}/deadletters/tasks/purge"
    forged = ("f" * 43, "f" * 43)
    for session, token in (forged, session_and_token(f"{dash.url}/deadletters")):
        # When: the operator's browser opens it.
        html = ATTACK_PAGE.format(action=action, token=token, session=session)
        browser.get(other_port_page(html))
        wait_until(
            lambda: (
                browser.current_url.startswith(dash.url)
                and browser.find_elements(By.TAG_NAME, "main")
            ),
            message="the form's answer",
        )
        # Then: refused, and nothing purged.
        assert "Forbidden" in browser.find_element(By.TAG_NAME, "main").text
        assert r.xlen("tasks:deadletter") == 3


def test_browser_job_id_cannot_inject_markup(
    browser: Any,
    start_dashboard: Callable[..., DashboardProcess],
    dash_app: App,
    r: redis.Redis,
) -> None:
    from urllib.parse import quote

    from selenium.webdriver.common.by import By

    # Given: a job whose argument is a link, and stored jobs (written before ids were
    # checked) whose ids climb out of their page's address to that job's JSON, or are markup.
    lure = "<a id=injected href=https://evil.example/login>log in</a>"
    target = dashboard_tasks.show.apply_async((lure,), countdown=3600)
    dash = start_dashboard()
    for job_id in (f"x/../../api/jobs/{target.id}", "x/../../api/jobs", "<b>pwn</b>"):
        carrier = dashboard_tasks.show.apply_async((1,), countdown=3600)
        r.rename(f"tasks:job:{carrier.id}", f"tasks:job:{job_id}")
        # When: their page is open long enough to refresh its live block.
        browser.get(f"{dash.url}/jobs/{quote(job_id, safe='')}")
        wait_until(
            lambda: (
                not browser.find_elements(By.ID, "live")
                or browser.find_element(By.ID, "live-status").text.startswith(("live ·", "offline"))
            ),
            message="a refresh",
        )
        # Then: no markup of the job's or its id's.
        assert browser.find_elements(By.ID, "injected") == [], job_id
        assert not browser.execute_script(
            "return [...document.querySelectorAll('b')].some(e => e.textContent === 'pwn')"
        )
        # (ids that check_job_id refuses get an error page: no job page at all)
        assert "evil.example" not in browser.find_element(By.TAG_NAME, "body").text, job_id


def test_secrets_leave_the_command_line(
    start_dashboard: Callable[..., DashboardProcess], redis_url: str, tmp_path: Path
) -> None:
    """``ps`` shows every user a process's arguments: the dashboard replaces its title, and
    says where the secrets should come from instead."""
    import urllib.error
    import urllib.request

    with_password = redis_url.replace("redis://", "redis://:hunter2-redis@", 1)
    dash = start_dashboard(
        "--token",
        "s3cret-token",
        "--basic-auth",
        "ops:pa55-basic",
        main_args=("--redis-url", with_password),
    )
    cmdline = Path(f"/proc/{dash.proc.pid}/cmdline").read_bytes()
    assert cmdline.startswith(b"taskq: dashboard 127.0.0.1:"), cmdline
    for secret in (b"s3cret-token", b"pa55-basic", b"hunter2-redis"):
        assert secret not in cmdline
    log = dash.log_path.read_text()
    for flag in ("--token", "--basic-auth", "--redis-url"):
        assert f"{flag} on the command line" in log or f"{flag} holds a password" in log, log
    # From a file (or the environment), nothing is said and the secret works.
    path = tmp_path / "token"
    path.write_text("from-a-file\n")
    quiet = start_dashboard("--token-file", str(path))
    css = f"{quiet.url}/static/dashboard.css"
    for bearer, status in (("nope", 401), ("from-a-file", 200)):
        request = urllib.request.Request(css, headers={"Authorization": f"Bearer {bearer}"})
        try:
            with urllib.request.urlopen(request, timeout=5) as response:
                assert response.status == status
        except urllib.error.HTTPError as exc:
            assert exc.code == status
    assert "deprecated" not in quiet.log_path.read_text()


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def test_the_operator_role_is_enough(dash_app: App, r: redis.Redis, redis_url: str) -> None:
    """The dashboard needs no Redis rights beyond ``taskq acl print --role operator``'s."""
    from taskq.ops.acl import setuser_args

    r.execute_command(*setuser_args("operator", ["tasks", "backlog"], password="pw"))
    try:
        r.acl_log_reset()
        host_port = redis_url.split("//", 1)[1].split("/", 1)[0]
        app = App(f"redis://taskq-operator:pw@{host_port}/0")
        job = dashboard_tasks.show.apply_async((1,), countdown=3600)
        dead_id, _ = add_deadletter(r, dash_app, "fragile", args=("d",))
        add_deadletter(r, dash_app, "fragile", args=("e",))
        dashboard_tasks.later.delay(1)
        with TestClient(asgi(app)) as c:
            for path in ("/", "/workers", f"/jobs/{job.id}", "/deadletters", "/periodic"):
                assert c.get(path).status_code == 200, path
            token = csrf_of(c.get(f"/deadletters/tasks/{dead_id}").text)
            c.post("/deadletters/tasks/retry", data={"ids": dead_id, "csrf": token})
            c.post(f"/cancel/{job.id}", data={"csrf": token})
            c.post("/deadletters/tasks/purge", data={"csrf": token})
        app.close()
        # All but redis-py's CLIENT SETINFO on connect, whose refusal it ignores (Redis 6.2
        # logs it; docs/security.md).
        assert [e for e in r.acl_log() if not _text(e["object"]).startswith("client")] == []
        assert job.status().state == "cancelled" and r.xlen("tasks:deadletter") == 0
    finally:
        r.acl_deluser("taskq-operator")


def test_browser_job_page_shows_progress_output_and_logs_live(
    browser: Any,
    start_dashboard: Callable[..., DashboardProcess],
    start_worker: Callable[..., WorkerProcess],
    dash_app: App,
) -> None:
    from selenium.webdriver.common.by import By

    # Given: a read-only dashboard, and a job that reports 40 steps, 50 ms apart.
    start_worker("-A", "tests.dashboard_tasks", "-Q", "tasks", "-c", "1")
    dash = start_dashboard("--read-only")
    job = dashboard_tasks.narrates.delay(40, 0.05)
    wait_until(lambda: job.progress() is not None, message="the job to start")
    # When: its page is open while it runs.
    browser.get(f"{dash.url}/jobs/{job.id}")

    def shown() -> tuple[str, str, str]:
        text = browser.find_element(By.ID, "job-progress-text").text
        return text, browser.find_element(By.ID, "job-output").text, job.status().state

    # Then: the progress moves while the job runs (faster than the 2 s refresh)...
    seen = wait_until(lambda: (s := shown())[0].startswith("1") and s, message="live progress")
    assert seen[2] == "running" and "step" in seen[0]
    # ... and at its end the page has every chunk and log line, as text.
    wait_until(
        lambda: browser.find_element(By.ID, "telemetry").get_attribute("data-ended"),
        message="the end event",
    )
    output = browser.find_element(By.ID, "job-output").text.splitlines()
    assert output == [f"<b class=injected>chunk {i}</b>" for i in range(40)]
    assert browser.find_element(By.ID, "job-progress-text").text == "40 / 40 · step 40"
    assert browser.find_element(By.ID, "job-progress").get_attribute("value") == "40"
    assert "WARNING did <i>39</i>" in browser.find_element(By.ID, "job-logs").text
    assert browser.find_elements(By.CSS_SELECTOR, ".injected, main i") == []
