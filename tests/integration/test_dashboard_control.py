"""The dashboard's control page (pause, resume, limits set at run time) and audit page:
operator actions with CSRF, hidden and refused in read-only mode."""

from __future__ import annotations

import re

import redis
from starlette.testclient import TestClient

from taskq import App
from taskq.broker.control import read_control
from taskq.dashboard import asgi
from taskq.pauses import LimitOverride, Pause


def _csrf(html: str) -> str:
    found = re.search(r'name="csrf" value="([^"]+)"', html)
    assert found, "the page has no form with a CSRF token"
    return found.group(1)


def test_an_operator_pauses_resumes_and_limits_from_the_dashboard(
    dash_app: App, r: redis.Redis
) -> None:
    queue = dash_app.settings.queue
    with TestClient(asgi(dash_app), raise_server_exceptions=False) as c:
        page = c.get("/control")
        assert page.status_code == 200 and "nothing is paused" in page.text
        csrf = _csrf(page.text)
        # without the token: refused
        assert c.post("/control/pause", data={"queue": queue}).status_code == 403
        done = c.post("/control/pause", data={"csrf": csrf, "queue": queue, "task": "t.x"})
        assert done.status_code == 200 and "paused" in done.text
        assert list(read_control(dash_app.link, [queue])[0][queue]) == [Pause("t.x")]
        form = {"csrf": csrf, "task": "t.x", "rate": "5/s", "concurrency": "2"}
        assert c.post("/control/limit", data=form).status_code == 200
        assert read_control(dash_app.link, [queue])[1][queue] == {
            Pause("t.x"): LimitOverride("5/s", 2)
        }
        bad = c.post("/control/limit", data={**form, "concurrency": "two"})
        assert bad.status_code == 400 and "concurrency" in bad.text
        page = c.get("/control").text
        assert 'data-pause="3:t.x:"' in page and "5/s" in page
        assert (
            c.post(
                "/control/resume", data={"csrf": csrf, "queue": queue, "task": "t.x"}
            ).status_code
            == 200
        )
        assert (
            c.post(
                "/control/limit/clear", data={"csrf": csrf, "queue": queue, "task": "t.x"}
            ).status_code
            == 200
        )
        assert read_control(dash_app.link, [queue]) == ({queue: {}}, {queue: {}})
        audit = c.get("/audit").text
        for action in ("pause", "resume", "limit_set", "limit_clear"):
            assert f'data-action="{action}"' in audit


def test_read_only_hides_the_controls_and_refuses_them(dash_app: App) -> None:
    with TestClient(asgi(dash_app, read_only=True), raise_server_exceptions=False) as c:
        html = c.get("/control").text
        assert '<form method="post"' not in html
        assert c.get("/audit").status_code == 200
        for path in ("/control/pause", "/control/resume", "/control/limit", "/control/limit/clear"):
            response = c.post(path, data={"task": "t.x"})
            assert response.status_code == 403 and "read-only" in response.text
