"""rediss:// URLs: the producer and a consumer over TLS, with the certificate verified; and
mutual TLS, where the server also asks each client for a certificate signed by its CA."""

from __future__ import annotations

import contextlib
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from click.testing import CliRunner

from taskq import App
from taskq.cli import main
from taskq.errors import BrokerUnavailable
from taskq.ops.devserver import find_redis_server
from taskq.testing import drain
from tests import tasks
from tests.conftest import WorkerProcess, wait_until
from tests.redis_server import free_port

pytestmark = pytest.mark.integration


def openssl(*args: str | Path) -> None:
    subprocess.run(["openssl", *map(str, args)], check=True, capture_output=True)


@pytest.fixture
def certs(tmp_path: Path) -> Path:
    """A CA, and a server and a client certificate it signed (EC keys: quick to make)."""
    if shutil.which("openssl") is None:
        pytest.skip("openssl is needed to make test certificates")
    key = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes")
    openssl(
        "req", "-x509", *key, "-days", "1", "-keyout", tmp_path / "ca.key",
        "-out", tmp_path / "ca.crt", "-subj", "/CN=taskq test CA",
        "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign",
    )  # fmt: skip
    for name, usage in (("server", "serverAuth"), ("client", "clientAuth")):
        ext = tmp_path / f"{name}.ext"
        ext.write_text(
            f"subjectAltName=IP:127.0.0.1\nextendedKeyUsage={usage}\n"
            "authorityKeyIdentifier=keyid\nbasicConstraints=CA:FALSE\n"
        )
        openssl(
            "req", *key, "-keyout", tmp_path / f"{name}.key", "-out", tmp_path / f"{name}.csr",
            "-subj", f"/CN=taskq test {name}",
        )  # fmt: skip
        openssl(
            "x509", "-req", "-in", tmp_path / f"{name}.csr", "-CA", tmp_path / "ca.crt",
            "-CAkey", tmp_path / "ca.key", "-CAcreateserial", "-days", "1",
            "-out", tmp_path / f"{name}.crt", "-extfile", ext,
        )  # fmt: skip
    return tmp_path


@contextlib.contextmanager
def tls_server(
    data_dir: Path, cert: Path, key: Path, ca: Path, *, auth_clients: bool, query: str
) -> Iterator[str]:
    """A redis-server on a TLS-only port while in the block, as a URL with ``query`` (the
    client's TLS parameters); skips the test if the binary was built without TLS."""
    port = free_port()
    proc = subprocess.Popen(
        [
            find_redis_server(),
            "--port", "0",
            "--tls-port", str(port),
            "--bind", "127.0.0.1",
            "--tls-cert-file", str(cert),
            "--tls-key-file", str(key),
            "--tls-ca-cert-file", str(ca),
            "--tls-auth-clients", "yes" if auth_clients else "no",
            "--save", "",
            "--dir", str(data_dir),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )  # fmt: skip
    url = f"rediss://127.0.0.1:{port}/0?{query}"
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


@pytest.fixture
def tls_url(tmp_path: Path) -> Iterator[str]:
    if shutil.which("openssl") is None:
        pytest.skip("openssl is needed to make a test certificate")
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    openssl(
        "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-keyout", key,
        "-out", cert, "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
    )  # fmt: skip
    query = f"ssl_ca_certs={cert}"
    with tls_server(tmp_path, cert, key, cert, auth_clients=False, query=query) as url:
        yield url


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


@pytest.fixture
def mtls_url(certs: Path) -> Iterator[str]:
    """A server that refuses clients without a certificate signed by the test CA, and the
    URL of a client with one."""
    query = (
        f"ssl_certfile={certs / 'client.crt'}&ssl_keyfile={certs / 'client.key'}"
        f"&ssl_ca_certs={certs / 'ca.crt'}"
    )
    server_cert, server_key, ca = certs / "server.crt", certs / "server.key", certs / "ca.crt"
    with tls_server(certs, server_cert, server_key, ca, auth_clients=True, query=query) as url:
        yield url


def test_a_client_without_a_certificate_is_refused(certs: Path, mtls_url: str) -> None:
    url = mtls_url.split("?")[0] + f"?ssl_ca_certs={certs / 'ca.crt'}"
    app = App(url)
    with pytest.raises(BrokerUnavailable, match=r"TLS with Redis .* ssl_certfile and ssl_keyfile"):
        app.reader.ping_ms()
    app.close()
    result = CliRunner().invoke(main, ["--redis-url", url, "inspect"])
    assert result.exit_code == 1
    [line] = result.output.splitlines()
    assert line.startswith(f"Error: TLS with Redis at {url} failed")


def test_a_producer_and_a_worker_with_certificates_run_a_job(mtls_url: str, tmp_path: Path) -> None:
    tasks.app.close()
    tasks.app.settings = tasks.app.settings.replace(redis_url=mtls_url)
    worker = WorkerProcess(mtls_url, "-A", "tests.tasks", "-c", "1", log_path=tmp_path / "w.log")
    try:
        assert tasks.add.delay(2, 3).result(timeout=10) == 5
    finally:
        worker.stop()
        tasks.app.close()
    assert "Traceback" not in worker.output()
