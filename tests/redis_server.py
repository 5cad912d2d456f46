"""The suite's private redis-server processes: taskq's own helper, plus a redis-py client for
assertions (tests talk to Redis directly; taskq itself does it only through its broker)."""

from __future__ import annotations

import redis

from taskq.ops.devserver import RedisServer as _RedisServer
from taskq.ops.devserver import free_port

__all__ = ["RedisServer", "free_port"]


class RedisServer(_RedisServer):
    """A private server (free port, own data dir, killed by pid at the end)."""

    def client(self) -> redis.Redis:
        return redis.Redis(port=self.port)
