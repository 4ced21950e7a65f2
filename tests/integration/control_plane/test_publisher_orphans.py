"""A publisher killed between `SET table:v:N NX` and moving the pointer leaves `table:v:N`
behind; the next publish deletes it (issue 13 item 14). Real redis-server."""

from __future__ import annotations

import pytest
import redis.asyncio as aioredis

from contracts.redis_keys import RedisKeys
from contracts.routing_table import with_version
from control_plane.settings import PublisherOptions
from control_plane.store.publisher import Publisher
from tests.integration.control_plane.tables import table

pytestmark = pytest.mark.integration


def publisher(client: aioredis.Redis, keys: RedisKeys) -> Publisher:
    return Publisher(client, keys, PublisherOptions(history_limit=20), clock=lambda: 1e9)


async def crash_after_writing(client: aioredis.Redis, keys: RedisKeys, seed: int) -> int:
    """What a publisher does before it dies: take a version, write it, never point at it."""
    version = int(await client.incr(keys.table_seq))
    body = with_version(table(seed), version).model_dump_json()
    assert await client.set(keys.table_version(version), body, nx=True)
    return version


async def test_next_publish_deletes_orphan_versions(
    redis_client: aioredis.Redis, redis_keys: RedisKeys
) -> None:
    pub = publisher(redis_client, redis_keys)
    first = (await pub.publish(table(1))).version
    orphans = [await crash_after_writing(redis_client, redis_keys, s) for s in (2, 3)]
    assert orphans == [first + 1, first + 2]
    result = await pub.publish(table(4))
    assert result.version == first + 3
    for orphan in orphans:
        assert await redis_client.exists(redis_keys.table_version(orphan)) == 0
    for kept in (first, result.version):
        assert await redis_client.exists(redis_keys.table_version(kept)) == 1
    assert await redis_client.zrange(redis_keys.table_history, 0, -1) == [
        str(first).encode(),
        str(result.version).encode(),
    ]


async def test_orphan_trim_keeps_kept_versions_after_a_rollback(
    redis_client: aioredis.Redis, redis_keys: RedisKeys
) -> None:
    pub = publisher(redis_client, redis_keys)
    one = (await pub.publish(table(1))).version
    two = (await pub.publish(table(2))).version
    await pub.rollback(one)
    orphan = await crash_after_writing(redis_client, redis_keys, 3)
    latest = (await pub.publish(table(4))).version
    assert await redis_client.exists(redis_keys.table_version(orphan)) == 0
    for kept in (one, two, latest):
        assert await redis_client.exists(redis_keys.table_version(kept)) == 1


async def test_a_version_newer_than_the_history_is_left_alone(
    redis_client: aioredis.Redis, redis_keys: RedisKeys
) -> None:
    """A version above the newest published one may belong to a publisher still at work
    (one whose lock expired): the trim does not delete it under that publisher."""
    pub = publisher(redis_client, redis_keys)
    first = (await pub.publish(table(1))).version
    in_flight = await crash_after_writing(redis_client, redis_keys, 2)
    await pub._trim_orphans()
    assert await redis_client.exists(redis_keys.table_version(in_flight)) == 1
    assert await redis_client.get(redis_keys.table_current) == str(first).encode()
