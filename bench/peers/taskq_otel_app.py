"""taskq with OpenTelemetry on or off (the otel family, bench/features/otel_bench.py).

``BENCH_OTEL=on`` (set by the bench for its "on" half, in the agent and so in the workers)
instruments the app with :mod:`taskq.contrib.otel` and gives every process that uses it an
SDK ``TracerProvider`` with a ``BatchSpanProcessor`` (the SDK's defaults: 5 s schedule, 2,048
queue, 512 per batch) over :class:`CountingExporter`, which keeps no span and writes how many
it was handed to ``otel-spans-<pid>`` in the record directory: the producer's, set up in
``setup()``, and each worker child's, in ``child_start`` (after the fork). Anything else
(``off``, unset) is the plain app. The task is the main bench's ``noop(i)``
(:func:`bench.common.job.job`: one record, one ``INCR``).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import taskq
from bench.common.job import job
from bench.common.record import ENV_DIR
from bench.peers.base import redis_url
from bench.peers.featurebase import Feature, taskq_cli

ENV = "BENCH_OTEL"
QUEUE = "obench"
MODULE = "bench.peers.taskq_otel_app"
ON = os.environ.get(ENV) == "on"

app = taskq.App(redis_url=redis_url(), queue=QUEUE)


@app.task
def noop(i: int) -> None:
    """Benchmark task: one record and one Redis INCR (bench.common.job)."""
    job(i)


def tracer_provider() -> Any:
    """An SDK provider: batch processor (defaults) over a counting, discarding exporter."""
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

    class CountingExporter(SpanExporter):
        """Discards spans; keeps their count in a file of this process (rewritten)."""

        def __init__(self) -> None:
            self.count = 0
            self.path = Path(os.environ[ENV_DIR]) / f"otel-spans-{os.getpid()}"

        def export(self, spans: Sequence[Any]) -> SpanExportResult:
            self.count += len(spans)
            self.path.write_text(str(self.count))
            return SpanExportResult.SUCCESS

    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(CountingExporter()))
    return provider


if ON:
    from opentelemetry import trace

    from taskq.contrib.otel import instrument

    class ChildTracing(taskq.Middleware):
        def child_start(self) -> None:
            trace.set_tracer_provider(tracer_provider())

    app.add_middleware(ChildTracing())
    instrument(app)  # the global provider: the producer's, or the child's


def problem(family: str) -> str | None:
    """Why the otel family cannot run here, or None."""
    try:
        import opentelemetry.sdk.trace  # noqa: F401

        import taskq.contrib.otel  # noqa: F401
    except ImportError as exc:
        return f"no OpenTelemetry SDK or taskq.contrib.otel ({exc})"
    return None


def spans_exported(record_dir: Path) -> dict[int, int]:
    """Spans handed to the exporter of each process (pid) of the round, as last written."""
    return {
        int(p.name.rsplit("-", 1)[1]): int(p.read_text() or 0)
        for p in record_dir.glob("otel-spans-*")
    }


class TaskqOtel(Feature):
    """One ``taskq worker -c <procs>`` command."""

    name = "taskq"
    packages = ("taskq", "redis", "hiredis", "msgpack", "opentelemetry-api", "opentelemetry-sdk")
    queue = QUEUE
    on = ON

    def setup(self) -> None:
        if ON:
            from opentelemetry import trace

            trace.set_tracer_provider(tracer_provider())

    def flush(self) -> None:
        """Export the producer's buffered spans (before a drain is timed)."""
        if ON:
            from opentelemetry import trace

            getattr(trace.get_tracer_provider(), "force_flush", lambda: None)()

    def close(self) -> None:
        if ON:
            from opentelemetry import trace

            getattr(trace.get_tracer_provider(), "shutdown", lambda: None)()

    def worker_argvs(self, procs: int, concurrency: int = 0) -> list[list[str]]:
        argv = [*taskq_cli(), "worker", "-A", f"{MODULE}:app", "-c", str(procs)]
        return [[*argv, "--loglevel", "warning"]]

    def enqueue_noop(self, n: int, batch: int = 1_000) -> None:
        """``n`` no-op jobs, bulk (``starmap``, batches of ``batch``)."""
        for lo in range(0, n, batch):
            noop.starmap((i,) for i in range(lo, min(n, lo + batch)))


OTEL = TaskqOtel()
