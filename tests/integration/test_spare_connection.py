"""The links' spare connection (kept out of the pool between exchanges): a restart of Redis
between two sends, a fork, many threads and many coroutines at once must each behave as with
the pool alone."""

from __future__ import annotations

import asyncio
import os
import threading
from pathlib import Path

import pytest
import redis

from taskq import App
from taskq.broker.alink import connect_async
from taskq.broker.links import connect
from tests.redis_server import RedisServer

pytestmark = pytest.mark.integration


@pytest.fixture
def server(tmp_path: Path) -> RedisServer:
    s = RedisServer(tmp_path / "redis", appendonly=True, appendfsync="always")
    s.start()
    yield s  # type: ignore[misc]
    s.kill()


def _app(url: str) -> App:
    app = App(redis_url=url)

    @app.task(name="spare.noop")
    def noop(i: int) -> None: ...

    return app


def test_a_send_after_redis_restarted_reconnects_instead_of_failing(server: RedisServer) -> None:
    app = _app(server.url)
    noop = app.get_task("spare.noop")
    first = noop.delay(1)
    restart(server)  # the spare's socket is now closed by the server
    second = noop.delay(2)  # no BrokerUnavailable: the stale spare was replaced
    ids = [e[0].decode() for e in redis.Redis(port=server.port).xrange("tasks:normal")]
    assert ids == [first.entry_id, second.entry_id]
    app.close()


def restart(server: RedisServer) -> None:
    server.kill()
    server.start()


def test_an_async_send_after_redis_restarted_reconnects(server: RedisServer) -> None:
    app = _app(server.url)
    noop = app.get_task("spare.noop")

    async def main() -> list[str | None]:
        first = await noop.adelay(1)
        await asyncio.to_thread(restart, server)  # (the loop runs meanwhile, as in an app)
        second = await noop.adelay(2)
        await app.aclose()
        return [first.entry_id, second.entry_id]

    sent = asyncio.run(main())
    ids = [e[0].decode() for e in redis.Redis(port=server.port).xrange("tasks:normal")]
    assert ids == sent


def test_a_forked_child_does_not_use_its_parents_spare(server: RedisServer) -> None:
    link = connect(server.url)
    parent_id = link.call("CLIENT", "ID")
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: its own connection, never the parent's socket
        try:
            os.write(write, b"%d" % link.call("CLIENT", "ID"))
        finally:
            os._exit(0)
    os.close(write)
    child_id = int(os.read(read, 64))
    os.waitpid(pid, 0)
    assert child_id != parent_id
    assert link.call("CLIENT", "ID") == parent_id  # the parent's spare is intact
    link.close()


def test_threads_sharing_a_link_each_get_their_own_replies(server: RedisServer) -> None:
    link = connect(server.url)
    wrong: list[tuple[int, object]] = []

    def echo(t: int) -> None:
        for i in range(100):
            value = b"%d:%d" % (t, i)
            reply = link.call("ECHO", value)
            if reply != value:
                wrong.append((t, reply))

    threads = [threading.Thread(target=echo, args=(t,)) for t in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert wrong == []
    link.close()


def test_coroutines_sharing_a_link_each_get_their_own_replies(server: RedisServer) -> None:
    """300 at once: more than redis-py's default pool of 100 would allow."""

    async def main() -> list[bytes]:
        link = connect_async(server.url)
        try:
            values = [b"%d" % i for i in range(300)]
            replies = await asyncio.gather(*(link.pipeline([("ECHO", v)]) for v in values))
            return [r for [r] in replies if r != values[int(r)]]
        finally:
            await link.close()

    assert asyncio.run(main()) == []
