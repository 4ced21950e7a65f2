"""The latency feedback writer against a real redis-server: summaries, not requests, in a
capped stream (docs/control_plane.md "Latency feedback")."""

from __future__ import annotations

import pytest
import redis.asyncio as aioredis

from contracts.latency_feedback import LatencyFeedback
from contracts.redis_keys import RedisKeys
from data_plane.decision.compile import compile_table
from data_plane.domain import Candidate
from data_plane.sync.feedback_writer import FeedbackWriter
from data_plane.telemetry.feedback import FeedbackAggregator, predicted_lines
from tests.component.data_plane.fakes import two_pair_table

pytestmark = pytest.mark.integration


def _candidate() -> Candidate:
    pair = compile_table(two_pair_table()).pairs[0]
    return Candidate(pair, pair.endpoints, 10, 10, 0.05, 0.15, 0.0, 1.0)


def _predicted_s() -> float:
    """The table's prediction for 10 prompt and 10 completion tokens at load 1."""
    ttft_s, tpot_s = predicted_lines(_candidate().pair, 1.0, 10)
    return ttft_s + 10 * tpot_s


async def test_one_summary_per_interval_whatever_the_traffic(
    redis_client: aioredis.Redis, redis_keys: RedisKeys
) -> None:
    clock = iter(range(100, 200, 10))
    aggregator = FeedbackAggregator(now=90.0)
    writer = FeedbackWriter(
        redis_client, redis_keys, "dp-a", aggregator, lambda: float(next(clock)), maxlen=3
    )
    assert await writer.write_once() == 0  # nothing served: nothing written
    assert await redis_client.xlen(redis_keys.feedback) == 0
    for _ in range(500):
        aggregator.observe(1, _candidate(), (2 * _predicted_s(), None), (10, 10))
    assert await writer.write_once() == 1
    entries = await redis_client.xrange(redis_keys.feedback)
    assert entries is not None
    ((_, fields),) = entries
    assert fields is not None
    report = LatencyFeedback.model_validate_json(fields[b"report"])
    assert (report.instance, report.table_version) == ("dp-a", 1)
    assert report.cells[0].e2e.n == 500
    assert report.cells[0].e2e.quantile(0.95) == pytest.approx(2.0, rel=0.05)
    for _ in range(5):
        aggregator.observe(1, _candidate(), (_predicted_s(), None), (10, 10))
        await writer.write_once()
    assert await redis_client.xlen(redis_keys.feedback) == 3  # capped


async def test_redis_down_drops_the_window_and_counts_it(redis_keys: RedisKeys) -> None:
    dead = aioredis.Redis(host="127.0.0.1", port=1, socket_connect_timeout=0.2)
    aggregator = FeedbackAggregator(now=0.0)
    writer = FeedbackWriter(dead, redis_keys, "dp-a", aggregator, lambda: 1.0)
    aggregator.observe(1, _candidate(), (2 * _predicted_s(), None), (10, 10))
    try:
        assert await writer.write_once() == 0
    finally:
        await dead.aclose()
    assert writer.failures == 1
