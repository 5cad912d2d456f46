"""Per-task duration summaries (taskq.broker.taskstats.Summary): percentiles from the
histogram stay within 5 % of the exact ones, and what Redis's Lua packs reads back."""

from __future__ import annotations

import math
import random

import msgpack

from taskq.broker.taskstats import Summary, bucket_ms, bucket_of


def exact(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


def test_percentiles_within_five_percent() -> None:
    rng = random.Random(7)
    for spread in (1.0, 3.0, 8.0):
        values = [math.exp(rng.gauss(3.0, spread / 3)) for _ in range(2000)]
        s = Summary()
        for v in values:
            s.add(v, failed=False, retried=False)
        for q in (0.5, 0.95):
            got = s.percentile_ms(q)
            assert got is not None
            assert abs(got - exact(values, q)) <= 0.05 * exact(values, q), (spread, q)
        assert s.max_ms == max(values)


def test_buckets_cover_their_durations() -> None:
    for ms in (0.001, 0.5, 1.0, 37.0, 1_000.0, 3_600_000.0):
        assert abs(bucket_ms(bucket_of(ms)) - ms) <= 0.05 * ms or ms <= 0.01


def test_merge_and_pack() -> None:
    a, b = Summary(), Summary()
    a.add(10, failed=True, retried=True)
    b.add(20, failed=False, retried=False)
    a.merge(Summary.unpack(b.pack()) or Summary())
    assert (a.runs, a.failures, a.retries, a.max_ms) == (2, 1, 1, 20)
    # Lua's cmsgpack packs a table keyed 1..n as an array.
    lua_form = msgpack.packb([3, 0, 0, 1.5, [2, 1]])
    found = Summary.unpack(lua_form)
    assert found is not None and found.buckets == {1: 2, 2: 1}
    assert Summary.unpack(b"not msgpack") is None
    assert Summary().percentile_ms(0.5) is None
