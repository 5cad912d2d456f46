"""The bench's private, throw-away redis-server: taskq's own test-server helper (no
persistence, a free loopback port), plus a redis-py client for the harness."""

from __future__ import annotations

from pathlib import Path

from redis import Redis

from taskq.ops.devserver import RedisServer


class PrivateRedis(RedisServer):
    """``redis-server`` without persistence, started and stopped by the bench."""

    def __init__(self, workdir: Path, binary: str = "redis-server") -> None:
        super().__init__(workdir, binary=binary, extra_args=["--loglevel", "warning"])

    def client(self) -> Redis:
        """A new client connection."""
        return Redis(host="127.0.0.1", port=self.port)

    def version(self) -> str:
        """The server's version string."""
        return str(self.client().info("server")["redis_version"])

    def flush(self) -> None:
        """FLUSHALL: every measurement starts from an empty Redis."""
        self.client().flushall()
