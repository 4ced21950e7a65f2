"""Publisher against a real redis-server: atomic publish, idempotence, history, rollback,
concurrency, and failures that leave the previous table current."""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
from collections.abc import AsyncIterator
from typing import Any

import pytest
import redis.asyncio as aioredis
from redis.asyncio.client import Pipeline

from contracts.redis_keys import RedisKeys
from contracts.routing_table import RoutingTable
from control_plane.settings import PublisherOptions
from control_plane.store.published_tables import PublishedTables
from control_plane.store.publisher import (
    PublishConflictError,
    Publisher,
    PublishError,
    PublishOutcome,
    VersionNotFoundError,
)
from control_plane.store.stored_data import StoredDataError
from tests.integration.control_plane.tables import table
from tests.support.redis_server import RedisProcess

pytestmark = pytest.mark.integration


def publisher(client: aioredis.Redis, keys: RedisKeys, limit: int = 20, **kw: object) -> Publisher:
    return Publisher(client, keys, PublisherOptions(history_limit=limit), clock=lambda: 1e9, **kw)  # type: ignore[arg-type]


async def stored(client: aioredis.Redis, keys: RedisKeys, version: int) -> RoutingTable:
    raw = await client.get(keys.table_version(version))
    assert raw is not None, f"version {version} is not stored"
    return RoutingTable.model_validate_json(raw)


async def test_publish_writes_version_pointer_history_and_event(
    redis_client: aioredis.Redis, redis_keys: RedisKeys
) -> None:
    pubsub = redis_client.pubsub()
    await pubsub.subscribe(redis_keys.table_events)
    await pubsub.get_message(timeout=1.0)  # the subscribe confirmation
    result = await publisher(redis_client, redis_keys).publish(table(1))
    assert result.outcome is PublishOutcome.PUBLISHED
    assert (result.version, result.previous_version) == (1, None)
    assert await redis_client.get(redis_keys.table_current) == b"1"
    assert (await stored(redis_client, redis_keys, 1)).content_sha256 == table(1).content_sha256
    assert (await stored(redis_client, redis_keys, 1)).version == 1
    assert await redis_client.zrange(redis_keys.table_history, 0, -1) == [b"1"]
    message = await pubsub.get_message(ignore_subscribe_messages=True, timeout=2.0)
    assert message is not None
    assert message["data"] == b"1"
    await pubsub.aclose()  # type: ignore[no-untyped-call]
    status = await PublishedTables(redis_client, redis_keys).status()
    assert status["last_outcome"] == "published"
    assert status["last_version"] == "1"


async def test_same_content_publishes_nothing(
    redis_client: aioredis.Redis, redis_keys: RedisKeys
) -> None:
    pub = publisher(redis_client, redis_keys)
    await pub.publish(table(1))
    again = await pub.publish(table(1))
    assert again.outcome is PublishOutcome.UNCHANGED
    assert again.version == 1
    assert await redis_client.get(redis_keys.table_seq) == b"1"
    assert await redis_client.exists(redis_keys.table_version(2)) == 0
    status = await PublishedTables(redis_client, redis_keys).status()
    assert status["last_outcome"] == "unchanged"


async def test_history_is_bounded_and_keeps_the_current_version(
    redis_client: aioredis.Redis, redis_keys: RedisKeys
) -> None:
    pub = publisher(redis_client, redis_keys, limit=3)
    for n in range(1, 6):
        await pub.publish(table(n))
    tables = PublishedTables(redis_client, redis_keys)
    current, kept = await tables.history()
    assert current == 5
    assert [v.version for v in kept] == [5, 4, 3]
    assert [v.current for v in kept] == [True, False, False]
    assert await redis_client.exists(*(redis_keys.table_version(v) for v in (1, 2))) == 0
    # Roll back to the oldest kept version: kept while current, trimmed once superseded.
    await pub.rollback(3)
    assert await redis_client.exists(redis_keys.table_version(3)) == 1
    await pub.publish(table(6))
    current, kept = await tables.history()
    assert current == 6
    assert [v.version for v in kept] == [6, 5, 4]
    with pytest.raises(VersionNotFoundError):
        await pub.rollback(3)


async def test_rollback_moves_the_pointer_and_announces_it(
    redis_client: aioredis.Redis, redis_keys: RedisKeys
) -> None:
    pub = publisher(redis_client, redis_keys)
    await pub.publish(table(1))
    await pub.publish(table(2))
    pubsub = redis_client.pubsub()
    await pubsub.subscribe(redis_keys.table_events)
    await pubsub.get_message(timeout=1.0)
    result = await pub.rollback(1)
    assert (result.version, result.previous_version) == (1, 2)
    assert result.content_sha256 == table(1).content_sha256
    assert await redis_client.get(redis_keys.table_current) == b"1"
    message = await pubsub.get_message(ignore_subscribe_messages=True, timeout=2.0)
    assert message is not None
    assert message["data"] == b"1"
    await pubsub.aclose()  # type: ignore[no-untyped-call]
    current = await PublishedTables(redis_client, redis_keys).current()
    assert current is not None
    assert current.version == 1
    # Publishing the content of v2 again after the rollback is a new version.
    assert (await pub.publish(table(2))).version == 3


async def test_rollback_refuses_unknown_and_invalid_versions(
    redis_client: aioredis.Redis, redis_keys: RedisKeys
) -> None:
    pub = publisher(redis_client, redis_keys)
    await pub.publish(table(1))
    await pub.publish(table(2))
    with pytest.raises(VersionNotFoundError):
        await pub.rollback(7)
    data = json.loads(await redis_client.get(redis_keys.table_version(1)) or b"{}")
    data["entries"][0]["input_usd_per_mtok"] = 0.0  # content no longer matches its hash
    await redis_client.set(redis_keys.table_version(1), json.dumps(data))
    with pytest.raises(StoredDataError, match="content_sha256 does not match"):
        await pub.rollback(1)
    assert await redis_client.get(redis_keys.table_current) == b"2"


async def test_failed_publish_leaves_the_previous_table_current(
    redis_client: aioredis.Redis, redis_keys: RedisKeys
) -> None:
    pub = publisher(redis_client, redis_keys)
    await pub.publish(table(1))
    # Occupy the next version's key: SET NX fails half-way through the publish.
    await redis_client.set(redis_keys.table_version(2), "squatter")
    with pytest.raises(PublishError, match="refusing to overwrite"):
        await pub.publish(table(2))
    assert await redis_client.get(redis_keys.table_current) == b"1"
    assert await redis_client.get(redis_keys.table_version(2)) == b"squatter"
    assert await redis_client.zrange(redis_keys.table_history, 0, -1) == [b"1"]
    status = await PublishedTables(redis_client, redis_keys).status()
    assert status["last_outcome"] == "failed"
    assert "refusing to overwrite" in status["last_error"]
    assert (await pub.publish(table(2))).version == 3  # the next attempt goes on


async def _watch_pointer(
    client: aioredis.Redis, keys: RedisKeys, seen: list[int], stop: asyncio.Event
) -> None:
    """Record every version the pointer names, checking each is fully stored right then."""
    while not stop.is_set():
        async with client.pipeline(transaction=True) as pipe:
            await pipe.watch(keys.table_current)
            raw = await pipe.get(keys.table_current)
            if raw is not None:
                assert await pipe.exists(keys.table_version(int(raw))) == 1, f"dangling {raw!r}"
                seen.append(int(raw))
            await pipe.unwatch()  # type: ignore[no-untyped-call]
        await asyncio.sleep(0)


class _JitterPipeline(Pipeline):
    """A real pipeline whose every round trip is delayed a random moment, so that concurrent
    publishers interleave in many orders (asyncio would otherwise run them in lockstep)."""

    rng = random.Random(7)

    async def immediate_execute_command(self, *args: Any, **options: Any) -> Any:
        await asyncio.sleep(self.rng.random() * 0.002)
        return await super().immediate_execute_command(*args, **options)  # type: ignore[no-untyped-call]

    async def execute(self, raise_on_error: bool = True) -> list[Any]:
        await asyncio.sleep(self.rng.random() * 0.002)
        return await super().execute(raise_on_error)


class _JitterRedis(aioredis.Redis):
    def pipeline(self, transaction: bool = True, shard_hint: str | None = None) -> Pipeline:
        return _JitterPipeline(
            self.connection_pool, self.response_callbacks, transaction, shard_hint
        )


@contextlib.asynccontextmanager
async def _no_lock() -> AsyncIterator[None]:
    """Stands for a publisher whose lock expired: only WATCH protects the pointer."""
    yield


@pytest.mark.parametrize("locked", [True, False], ids=["lock", "watch-only"])
async def test_concurrent_publishers_never_leave_a_dangling_pointer(
    redis_server: RedisProcess, redis_keys: RedisKeys, locked: bool
) -> None:
    clients = [_JitterRedis.from_url(redis_server.url) for _ in range(8)]
    clients.append(aioredis.Redis.from_url(redis_server.url))
    try:
        pubs = [
            publisher(c, redis_keys, limit=1, **({} if locked else {"lock": _no_lock}))
            for c in clients[:8]
        ]
        seen: list[int] = []
        stop = asyncio.Event()
        watcher = asyncio.create_task(_watch_pointer(clients[8], redis_keys, seen, stop))
        conflicts = 0
        for round_ in range(4):
            outcomes = await asyncio.gather(
                *(p.publish(table(10 * round_ + i)) for i, p in enumerate(pubs)),
                return_exceptions=True,
            )
            for outcome in outcomes:
                if isinstance(outcome, BaseException):
                    assert not locked, outcome
                    assert isinstance(outcome, PublishConflictError), outcome
                    conflicts += 1
        stop.set()
        await watcher
        current = await clients[8].get(redis_keys.table_current)
        assert current is not None
        assert await clients[8].exists(redis_keys.table_version(int(current))) == 1
        assert seen == sorted(seen), "the pointer never moves backwards"
        assert conflicts > 0 or locked, "the jitter should make unlocked publishers collide"
        table_now = await PublishedTables(clients[8], redis_keys).current()
        assert table_now is not None
        assert table_now.version == int(current)
    finally:
        for c in clients:
            await c.aclose()
