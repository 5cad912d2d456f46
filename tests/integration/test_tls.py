"""rediss:// URLs: the producer and a consumer over TLS, with the certificate verified."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from taskq import App
from taskq.ops.devserver import find_redis_server
from taskq.testing import drain
from tests.conftest import wait_until
from tests.redis_server import free_port

pytestmark = pytest.mark.integration


@pytest.fixture
def tls_url(tmp_path: Path) -> Iterator[str]:
    if shutil.which("openssl") is None:
        pytest.skip("openssl is needed to make a test certificate")
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "1",
            "-keyout",
            str(key),
            "-out",
            str(cert),
            "-subj",
            "/CN=127.0.0.1",
            "-addext",
            "subjectAltName=IP:127.0.0.1",
        ],
        check=True,
        capture_output=True,
    )
    port = free_port()
    proc = subprocess.Popen(
        [
            find_redis_server(),
            "--port",
            "0",
            "--tls-port",
            str(port),
            "--bind",
            "127.0.0.1",
            "--tls-cert-file",
            str(cert),
            "--tls-key-file",
            str(key),
            "--tls-ca-cert-file",
            str(cert),
            "--tls-auth-clients",
            "no",
            "--save",
            "",
            "--dir",
            str(tmp_path),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"rediss://127.0.0.1:{port}/0?ssl_ca_certs={cert}"
    client = redis.Redis.from_url(url)

    def answers() -> bool:
        if proc.poll() is not None:
            pytest.skip("this redis-server cannot serve TLS (built without it)")
        try:
            return bool(client.ping())
        except redis.ConnectionError:
            return False

    try:
        wait_until(answers, message="the TLS server")
        yield url
    finally:
        client.close()
        proc.kill()
        proc.wait(10)


def test_jobs_flow_over_tls(tls_url: str) -> None:
    app = App(tls_url)
    done: list[int] = []

    @app.task(name="tls.add")
    def add(a: int, b: int) -> None:
        done.append(a + b)

    add.delay(1, 2)
    drain(app)
    assert done == [3]
    app.close()
