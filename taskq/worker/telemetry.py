"""A child's writer of its jobs' telemetry: progress, output chunks and log records, buffered
in memory and flushed to each job's own keys by one background thread (every job's writes of
a flush in one pipeline).

Chunks and log records are sent as soon as the thread is free (while a flush is in flight,
the next ones gather for the one after it: a group commit, no timer); progress is coalesced,
the latest value wins and it is sent at most once per :data:`PROGRESS_INTERVAL_S` per job
unless it rides along with chunks. Nothing here runs for a job that uses none of it: its
buffer is made on the first call, and only a job that has one gets the final flush (its
end entry and the result TTL) as its run ends. See docs/telemetry.md.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import msgpack

from taskq.broker.link import script_command
from taskq.broker.resp import Command
from taskq.context import JobContext, current_job
from taskq.errors import BrokerError, BrokerUnavailable, ChunkTooLarge
from taskq.keys import QueueKeys
from taskq.telemetry import check_number, encode_log, progress_fields
from taskq.worker.outcome import CANCELLED, DEAD, OK

if TYPE_CHECKING:
    from taskq.broker.link import Link
    from taskq.config import Settings

logger = logging.getLogger(__name__)

PROGRESS_INTERVAL_S = 0.1
"""A job's progress is written at most this often (plus once as its run ends)."""
MAX_BATCH_ITEMS = 1_000
"""Most chunks (and, apart, log records) of one job sent in one flush; more wait for the next."""
MAX_BATCH_BYTES = 4 * 1024 * 1024
"""Most bytes of chunks of one job sent in one flush (one chunk may exceed it alone)."""
MAX_LOG_CHARS = 8_192
"""A log record's message (with its traceback) is cut to this length."""
OUTAGE_PAUSE_S = 0.5
"""Pause of the flusher after Redis could not be reached (the data stays buffered)."""
END_STATES = {OK: "succeeded", DEAD: "failed", CANCELLED: "cancelled"}
"""The end entry of a run whose outcome ends the job (a retry continues the stream)."""
ENDED_KEPT = 1_024
"""Ended runs remembered, so that a thread a task left behind cannot reopen its telemetry."""


class _Buffer:
    """What one run of a job has not sent yet."""

    def __init__(self, keys: list[str], attempt: int) -> None:
        self.keys, self.attempt = keys, attempt
        self.progress: list[Any] | None = None
        self.chunks: list[bytes] = []
        self.logs: list[bytes] = []
        self.progress_sent_s = -PROGRESS_INTERVAL_S

    def urgent(self) -> bool:
        return bool(self.chunks or self.logs)

    def progress_due_s(self) -> float:
        """When its pending progress may be sent (inf: none pending)."""
        if self.progress is None:
            return float("inf")
        return self.progress_sent_s + PROGRESS_INTERVAL_S


class Telemetry:
    """The telemetry sink of one process's jobs (a :class:`~taskq.context.TelemetrySink`).

    Args:
        link: gives the link to write on (asked at each flush: the process's own, made
            again after a fork; thread-safe).
        settings: the caps and TTLs.
    """

    def __init__(self, link: Callable[[], Link], settings: Settings) -> None:
        self.link = link
        self.max_chunks = settings.output_max_chunks
        self.max_chunk_bytes = settings.output_max_chunk_bytes
        self.log_max_bytes = settings.log_max_bytes
        self.running_ttl_ms = settings.telemetry_ttl_s * 1000
        self.ended_ttl_ms = settings.result_ttl_s * 1000
        self._buffers: dict[tuple[str, int], _Buffer] = {}
        self._ended: OrderedDict[tuple[str, int], None] = OrderedDict()
        self._cond = threading.Condition()
        self._sending = threading.Lock()
        """Held while a flush is sent: the final flush of a run waits for the one in flight."""
        self._thread: threading.Thread | None = None
        self.round_trips = 0
        """Flushes sent (for tests and the benchmark)."""
        install_log_capture()

    # -- the task's calls (TelemetrySink) --------------------------------------------------

    def progress(
        self, job: JobContext, done: float, total: float | None, message: str | None
    ) -> None:
        check_number("done", done)
        if total is not None:
            check_number("total", total)
        if message is not None and not isinstance(message, str):
            raise TypeError(f"progress message must be a str, not {type(message).__name__}")
        fields = progress_fields(done, total, message, int(time.time() * 1000), job.attempt)
        with self._cond:
            buffer = self._buffer(job)
            if buffer is not None:
                buffer.progress = fields
                self._cond.notify()

    def emit(self, job: JobContext, value: Any) -> None:
        try:
            chunk: bytes = msgpack.packb(value, use_bin_type=True)
        except (TypeError, ValueError, OverflowError) as exc:
            raise TypeError(
                f"emit: a {type(value).__name__} is not msgpack-serializable: {exc}"
            ) from None
        if len(chunk) > self.max_chunk_bytes:
            raise ChunkTooLarge(
                f"emit: the chunk is {len(chunk)} bytes encoded, over the "
                f"{self.max_chunk_bytes}-byte limit (output_max_chunk_bytes); it was not written"
            )
        with self._cond:
            buffer = self._buffer(job)
            if buffer is not None:
                buffer.chunks.append(chunk)
                self._cond.notify()

    def log(self, job: JobContext, record: logging.LogRecord) -> None:
        message = _message_of(record)
        packed = encode_log(record.levelname, int(record.created * 1000), message, job.attempt)
        with self._cond:
            buffer = self._buffer(job)
            if buffer is not None:
                buffer.logs.append(packed)
                self._cond.notify()

    # -- the run's end -------------------------------------------------------------------

    def used_by(self, job: JobContext) -> bool:
        """Whether this run of ``job`` wrote telemetry (one dict lookup)."""
        return (job.id, job.attempt) in self._buffers

    def end(self, job: JobContext, kind: str) -> None:
        """Send what the run left and, if its outcome ends the job, its end entry and the
        result TTL; wait for it (the outcome is recorded after). Never raises."""
        key = (job.id, job.attempt)
        with self._sending:
            with self._cond:
                buffer = self._buffers.pop(key, None)
                self._ended[key] = None
                if len(self._ended) > ENDED_KEPT:
                    self._ended.popitem(last=False)
            if buffer is None:
                return
            ending = END_STATES.get(kind, "")
            ttl_ms = self.ended_ttl_ms if ending else self.running_ttl_ms
            commands = self._commands(buffer, ending, ttl_ms)
            while buffer.urgent():
                commands += self._commands(buffer, ending, ttl_ms)
            self._send(commands, [buffer] * len(commands))

    # -- the flusher -----------------------------------------------------------------------

    def _buffer(self, job: JobContext) -> _Buffer | None:
        """The run's buffer (made on its first call; the caller holds ``_cond``); None once
        the run has ended."""
        key = (job.id, job.attempt)
        buffer = self._buffers.get(key)
        if buffer is None:
            if key in self._ended:
                return None
            k = QueueKeys(job.queue)
            keys = [k.progress(job.id), k.output(job.id), k.logs(job.id), k.logsize(job.id)]
            buffer = self._buffers[key] = _Buffer(keys, job.attempt)
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="taskq-telemetry", daemon=True
                )
                self._thread.start()
        return buffer

    def _run(self) -> None:
        while True:
            self._wait_for_work()
            with self._sending:
                with self._cond:
                    due = self._due(time.monotonic())
                    commands: list[Command] = []
                    owners: list[_Buffer] = []
                    for b in due:
                        commands += self._commands(b, "", self.running_ttl_ms)
                        owners += [b] * (len(commands) - len(owners))
                try:
                    reached = not commands or self._send(commands, owners)
                except Exception:  # a bug here must not stop every later flush
                    logger.exception("telemetry flush failed")
                    reached = False
            if not reached:
                time.sleep(OUTAGE_PAUSE_S)

    def _wait_for_work(self) -> None:
        with self._cond:
            while True:
                now = time.monotonic()
                if any(b.urgent() for b in self._buffers.values()):
                    return
                next_s = min(
                    (b.progress_due_s() for b in self._buffers.values()), default=float("inf")
                )
                if next_s <= now:
                    return
                self._cond.wait(None if next_s == float("inf") else next_s - now)

    def _due(self, now: float) -> list[_Buffer]:
        return [b for b in self._buffers.values() if b.urgent() or b.progress_due_s() <= now]

    def _commands(self, buffer: _Buffer, ending: str, ttl_ms: int) -> list[Command]:
        """The commands of ``buffer``'s pending data, taken out of it (the caller holds
        ``_cond``, or owns the buffer); ``ending`` goes with the call that empties it.

        Progress and chunks are plain commands (one ``HSET`` replaces the whole progress;
        one ``XADD`` per chunk): cheaper for Redis than a script, so a chunk reaches its
        readers about as fast as a bare ``XADD``. Log records need the byte cap, which
        ``telemetry_logs.lua`` keeps in one step.
        """
        progress_key, output_key, logs_key, logsize_key = buffer.keys
        out: list[Command] = []
        progress, buffer.progress = buffer.progress, None
        if progress is not None:
            buffer.progress_sent_s = time.monotonic()
            out += [("HSET", progress_key, *progress), ("PEXPIRE", progress_key, ttl_ms)]
        trim = ("MAXLEN", "~", self.max_chunks, "*", "a", buffer.attempt)
        chunks = _take(buffer.chunks, MAX_BATCH_BYTES)
        out += [("XADD", output_key, *trim, "c", chunk) for chunk in chunks]
        logs = _take(buffer.logs, MAX_BATCH_BYTES)
        if logs:
            args = [ttl_ms, self.log_max_bytes, *logs]
            out.append(script_command("telemetry_logs", [logs_key, logsize_key], args))
        if ending and not buffer.urgent():
            out.append(("XADD", output_key, *trim, "end", ending))
            out += [("PEXPIRE", key, ttl_ms) for key in buffer.keys]
        elif chunks:
            out.append(("PEXPIRE", output_key, ttl_ms))
        return out

    def _send(self, commands: list[Any], buffers: list[_Buffer]) -> bool:
        """Send one flush; False if Redis could not be reached. What could not be written
        is dropped with a warning: telemetry never holds up a job or its child."""
        self.round_trips += 1
        try:
            replies = self.link().pipeline(commands, errors=False)
        except BrokerError as exc:
            logger.warning("telemetry of %d job(s) not written: %s", len(commands), exc)
            return not isinstance(exc, BrokerUnavailable)
        for reply, buffer in zip(replies, buffers, strict=True):
            if isinstance(reply, BrokerError):
                logger.warning("telemetry not written to %s: %s", buffer.keys[1], reply)
        return True


def _take(items: list[bytes], max_bytes: int) -> list[bytes]:
    """The first items, up to :data:`MAX_BATCH_ITEMS` and ``max_bytes`` (at least one),
    removed from ``items``."""
    size, n = 0, 0
    for item in items[:MAX_BATCH_ITEMS]:
        size += len(item)
        if n and size > max_bytes:
            break
        n += 1
    taken = items[:n]
    del items[:n]
    return taken


def _message_of(record: logging.LogRecord) -> str:
    try:
        message = record.getMessage()
        if record.exc_info:
            message += "\n" + logging.Formatter().formatException(record.exc_info)
    except Exception as exc:  # a record whose arguments do not format
        message = f"<the log message could not be formatted: {type(exc).__name__}>"
    return message[:MAX_LOG_CHARS]


class _JobLogs(logging.Handler):
    """On the root logger: each record logged inside a job whose context has a telemetry sink
    goes to that job's logs (records outside a job cost one context lookup)."""

    def handle(self, record: logging.LogRecord) -> bool:  # (no lock: the sink has its own)
        job = current_job()
        if job is None or job.sink is None:
            return False
        try:
            job.sink.log(job, record)
        except Exception:  # a logging failure must not become the task's
            return False
        return True

    def emit(self, record: logging.LogRecord) -> None:  # pragma: no cover (handle() does it)
        self.handle(record)


def install_log_capture() -> None:
    """Put the job-log handler on the root logger, unless it is there (once per process;
    again if logging was configured since, which replaces the root's handlers)."""
    root = logging.getLogger()
    if not any(isinstance(h, _JobLogs) for h in root.handlers):
        root.addHandler(_JobLogs())
