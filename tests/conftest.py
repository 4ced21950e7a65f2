"""Session fixtures: one real redis-server per test session (fails, never skips, if absent)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from itertools import count

import pytest
import redis.asyncio as aioredis

from contracts.redis_keys import RedisKeys
from tests.support.redis_server import RedisProcess, running_redis

_prefixes = count()


@pytest.fixture(scope="session")
def redis_server() -> Iterator[RedisProcess]:
    """A real redis-server on a free loopback port for the whole session."""
    with running_redis() as proc:
        yield proc


@pytest.fixture
def redis_keys() -> RedisKeys:
    """A fresh key prefix per test, so tests share the server but never each other's keys."""
    return RedisKeys(prefix=f"t{next(_prefixes)}")


@pytest.fixture
async def redis_client(redis_server: RedisProcess) -> AsyncIterator[aioredis.Redis]:
    client = aioredis.Redis.from_url(redis_server.url, decode_responses=False)
    try:
        yield client
    finally:
        await client.aclose()
