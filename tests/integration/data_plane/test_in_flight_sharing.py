"""Two replicas see each other's in-flight counts through a real redis-server
(docs/data_plane.md, "In-flight sharing"), and a replica that goes quiet expires."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import redis.asyncio as aioredis

from contracts.redis_keys import RedisKeys
from data_plane.resilience.endpoint_load import LoadTracker
from data_plane.sync.in_flight_sharing import InFlightSharing
from data_plane.sync.replica_identity import ReplicaIdentity

INTERVAL_S = 0.05
TTL_S = 0.5


def _replica(keys: RedisKeys, name: str) -> tuple[LoadTracker, InFlightSharing]:
    tracker = LoadTracker()
    sharing = InFlightSharing(
        keys.in_flight_events,
        ReplicaIdentity(name, lambda: None, time.monotonic),
        tracker.in_flight_all,
        tracker.set_peers_in_flight,
        TTL_S,
        time.monotonic,
    )
    return tracker, sharing


async def _until(check: Callable[[], bool], timeout_s: float = 3.0) -> float:
    started = time.monotonic()
    while not check():
        assert time.monotonic() - started < timeout_s, "condition never held"
        await asyncio.sleep(0.01)
    return time.monotonic() - started


async def test_two_replicas_see_each_others_in_flight(
    redis_client: aioredis.Redis, redis_keys: RedisKeys
) -> None:
    (a, share_a), (b, share_b) = _replica(redis_keys, "dp-a"), _replica(redis_keys, "dp-b")
    tasks = [
        asyncio.create_task(coro)
        for s in (share_a, share_b)
        for coro in (
            s.publish_forever(redis_client, INTERVAL_S),
            s.listen_forever(redis_client, INTERVAL_S),
        )
    ]
    try:
        await _until(lambda: share_a.heard > 0 and share_b.heard > 0)
        for _ in range(3):
            a.acquire("cheap#0")
        b.acquire("cheap#0")
        b.acquire("other#0")
        seen = await _until(lambda: b.load.get("cheap#0") == 4.0 and a.load.get("cheap#0") == 4.0)
        assert seen < 1.0  # within a few intervals, long before a 1 s scrape
        assert a.load.get("other#0") == 1.0
        assert b.peers_in_flight() == {"cheap#0": 3.0}
        a.release("cheap#0")
        await _until(lambda: b.load.get("cheap#0") == 3.0)
        await _stop(tasks[:1])  # dp-a stops publishing: its counts expire at dp-b after the TTL
        await _until(lambda: b.load.get("cheap#0") == 1.0, timeout_s=TTL_S + 1.0)
        assert a.load.get("cheap#0") == 3.0  # dp-b still publishes
    finally:
        await _stop(tasks)


async def _stop(tasks: list[asyncio.Task[None]]) -> None:
    """Cancel until done: redis-py can swallow a cancel on Python 3.11 (see data_plane.app)."""
    while pending := [t for t in tasks if not t.done()]:
        for task in pending:
            task.cancel()
        await asyncio.wait(pending, timeout=0.2)
