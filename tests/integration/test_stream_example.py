"""examples/stream_to_browser.py end to end: the Starlette app under uvicorn relays a job's
output as Server-Sent Events while a real ``taskq worker`` runs it."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable, Iterator
from urllib.request import Request, urlopen

import pytest

from tests.conftest import WorkerProcess
from tests.examples_support import http, web_process
from tests.redis_server import free_port

pytest.importorskip("starlette")
pytest.importorskip("uvicorn")
pytestmark = pytest.mark.integration

WORDS = [
    "Once",
    "upon",
    "a",
    "time",
    "a",
    "otter",
    "found",
    "a",
    "queue",
    "that",
    "never",
    "lost",
    "a",
    "job",
    ".",
]


def events(
    url: str, method: str = "GET", headers: dict[str, str] | None = None
) -> Iterator[tuple[str, dict[str, object], str | None, float]]:
    """The Server-Sent Events of ``url``: (event, data, id, arrival time), as they arrive."""
    with urlopen(Request(url, method=method, headers=headers or {}), timeout=30) as response:
        assert response.headers["content-type"].startswith("text/event-stream")
        fields: dict[str, str] = {}
        for raw in response:
            line = raw.decode().rstrip("\n")
            if line:
                name, _, value = line.partition(": ")
                fields[name] = value
                continue
            if "event" in fields:
                data = json.loads(fields["data"])
                yield fields["event"], data, fields.get("id"), time.monotonic()
            fields = {}


def test_the_endpoint_relays_the_jobs_tokens_live_and_a_client_resumes(
    start_worker: Callable[..., WorkerProcess], redis_url: str
) -> None:
    cmd = [sys.executable, "-m", "examples.stream_to_browser"]
    with web_process(cmd, redis_url, free_port()) as base:
        # Given: the web app, and a worker serving its tasks (50 ms per token).
        w = start_worker("-A", "examples.stream_to_browser", "-c", "1", STORY_TOKEN_DELAY_S="0.05")
        # When: a story is asked for.
        got = list(events(base + "/stories?topic=otter", "POST"))
        # Then: its tokens come one by one while the job runs, then how it ended.
        kinds = [e[0] for e in got]
        assert kinds == ["job"] + ["token"] * len(WORDS) + ["end"], got
        tokens = [e for e in got if e[0] == "token"]
        assert "".join(str(e[1]["text"]) for e in tokens) == " ".join(WORDS) + " "
        assert tokens[-1][3] - tokens[0][3] > 0.5 * 0.05 * (len(WORDS) - 1)  # live, not at once
        assert got[-1][1] == {"state": "succeeded", "words": len(WORDS)}
        job_id = str(got[0][1]["job_id"])
        # A client that reconnects with the last id it got receives exactly the rest.
        rest = list(
            events(f"{base}/stories/{job_id}", headers={"Last-Event-ID": str(tokens[4][2])})
        )
        assert [e[1]["text"] for e in rest if e[0] == "token"] == [f"{x} " for x in WORDS[5:]]
        assert http("GET", base + "/stories/nope")[0] == 404
    assert "Traceback" not in w.output()
