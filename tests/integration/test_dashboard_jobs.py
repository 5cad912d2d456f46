"""The dashboard's queue pages (``/queues/<queue>/<state>``) and their actions, through
Starlette's TestClient against a real Redis: rows are what raw Redis holds, figures are
``taskq inspect --json``'s, actions need CSRF and are refused read-only, text is escaped."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest
import redis
from starlette.testclient import TestClient

from taskq import App
from taskq.dashboard import asgi
from taskq.keys import QueueKeys
from tests import dashboard_tasks
from tests.conftest import wait_until

pytestmark = pytest.mark.integration

XSS = "<script>alert('xss')</script>"
Q = QueueKeys("backlog")


@pytest.fixture
def dash_app(redis_url: str) -> Iterator[App]:
    app = dashboard_tasks.app
    app.settings = app.settings.replace(redis_url=redis_url)
    yield app
    app.close()


@pytest.fixture
def client(dash_app: App) -> Iterator[TestClient]:
    with TestClient(asgi(dash_app), raise_server_exceptions=False) as c:
        yield c


def shown(html: str) -> list[str]:
    return re.findall(r'data-job-id="([^"]*)"', html)


def csrf_of(html: str) -> str:
    found = re.search(r'name="csrf" value="([^"]+)"', html)
    assert found
    return found.group(1)


def test_each_state_lists_what_redis_holds(client: TestClient, dash_app: App) -> None:
    waiting = [dashboard_tasks.later.delay(i) for i in range(60)]
    page = client.get("/queues/backlog/waiting")
    assert page.status_code == 200
    assert shown(page.text) == [j.id for j in waiting[:50]]
    assert re.search(r'data-figure="waiting">60<', page.text)
    after = re.search(r'id="next" href="[^"]*after=([0-9-]+)"', page.text)
    assert after
    rest = client.get(f"/queues/backlog/waiting?after={after.group(1)}").text
    assert shown(rest) == [j.id for j in waiting[50:]]
    later = dashboard_tasks.show.apply_async((XSS,), countdown=3600)
    scheduled = client.get(f"/queues/{dash_app.settings.queue}/scheduled").text
    assert shown(scheduled) == [later.id]
    for state in ("running", "retrying"):
        assert client.get(f"/queues/backlog/{state}").status_code == 200
    doc = client.get("/api/queues/backlog/waiting?args=5").json()
    assert [row["args"] for row in doc["rows"]] == [str(n) for n in range(60) if "5" in str(n)]


def test_bad_names_are_refused(client: TestClient) -> None:
    assert client.get("/queues/backlog/nope").status_code == 400
    assert client.get("/queues/nosuchqueue/waiting").status_code == 404
    assert client.get("/queues/backlog/waiting?priority=urgent").status_code == 400
    assert client.get("/queues/backlog/waiting?after=x").status_code == 400


def test_escaped_on_the_new_pages(client: TestClient, dash_app: App) -> None:
    dashboard_tasks.later.delay(XSS)
    html = client.get(f"/queues/backlog/waiting?args={XSS}").text
    assert "<script>alert" not in html and "&lt;script&gt;alert(" in html


def test_selected_jobs_are_acted_on_with_csrf(
    client: TestClient, dash_app: App, r: redis.Redis
) -> None:
    jobs = [dashboard_tasks.later.delay(i) for i in range(5)]
    page = client.get("/queues/backlog/waiting").text
    refs = re.findall(r'name="refs" value="([^"]+)"', page)
    form = {"refs": refs[:2], "action": "delete", "priority": "normal"}
    assert client.post("/queues/backlog/waiting/act", data=form).status_code == 403
    done = client.post(
        "/queues/backlog/waiting/act", data={**form, "csrf": csrf_of(page)}, follow_redirects=False
    )
    assert done.status_code == 303 and "delete%3A+2+of+2" in done.headers["location"]
    again = client.post("/queues/backlog/waiting/act", data={**form, "csrf": csrf_of(page)})
    assert again.status_code == 200
    assert shown(client.get("/queues/backlog/waiting").text) == [j.id for j in jobs[2:]]
    move = {"refs": refs[2:3], "action": "move", "to": "high", "csrf": csrf_of(page)}
    client.post("/queues/backlog/waiting/act", data=move)
    assert shown(client.get("/queues/backlog/waiting?priority=high").text) == [jobs[2].id]
    assert r.xlen(Q.stream("normal")) == 2


def test_all_matching_runs_with_progress(client: TestClient, dash_app: App, r: redis.Redis) -> None:
    keep = [dashboard_tasks.later.delay(f"keep{i}") for i in range(20)]
    for i in range(1200):
        dashboard_tasks.later.delay(f"drop{i}")
    page = client.get("/queues/backlog/waiting?args=drop").text
    form = {"bulk": "cancel", "args": "drop", "priority": "normal", "csrf": csrf_of(page)}
    started = client.post("/queues/backlog/waiting/act", data=form, follow_redirects=False)
    assert started.status_code == 303
    progress = started.headers["location"].split("?")[0]

    def finished() -> str | None:
        live = client.get(progress + "?part=live")
        assert live.headers["x-taskq-live"] == "bulk"
        return live.text if 'data-finished="yes"' in live.text else None

    text = wait_until(finished, timeout_s=20)
    assert re.search(r'data-figure="handled">1200<.*data-figure="found">1200<', text, re.S)
    assert [row["job_id"] for row in client.get("/api/queues/backlog/waiting").json()["rows"]] == [
        j.id for j in keep
    ]


def test_read_only_hides_and_refuses(dash_app: App) -> None:
    dashboard_tasks.later.delay(1)
    with TestClient(asgi(dash_app, read_only=True)) as c:
        page = c.get("/queues/backlog/waiting").text
        assert '<form method="post"' not in page and 'name="refs"' not in page
        refused = c.post("/queues/backlog/waiting/act", data={"refs": "1-0", "action": "delete"})
        assert refused.status_code == 403 and "read-only" in refused.text
