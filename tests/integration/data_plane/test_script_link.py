"""A script called over a connection of its own (`data_plane/sync/script_link.py`), against a
real redis-server: it survives Redis forgetting the script and losing the connection."""

from __future__ import annotations

import hashlib

import pytest
import redis.asyncio as aioredis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ResponseError

from data_plane.sync.script_link import ScriptLink

ECHO = "return {KEYS[1], ARGV[1], tonumber(ARGV[2]) + 1}"


async def test_a_flushed_script_is_run_again_and_cached(redis_client: aioredis.Redis) -> None:
    link = ScriptLink(redis_client, ECHO)
    try:
        assert await link(["k"], ["a", 1]) == [b"k", b"a", 2]
        await redis_client.script_flush()  # a restarted Redis has no scripts
        assert await link(["k"], ["b", 2]) == [b"k", b"b", 3]
        sha = hashlib.sha1(ECHO.encode(), usedforsecurity=False).hexdigest()
        assert await redis_client.script_exists(sha) == [True]  # EVALSHA works again
    finally:
        await link.close()


async def test_a_lost_connection_fails_one_call_and_the_next_reconnects(
    redis_client: aioredis.Redis,
) -> None:
    link = ScriptLink(redis_client, ECHO)
    try:
        assert await link(["k"], ["a", 1]) == [b"k", b"a", 2]
        killed = await redis_client.client_kill_filter(_type="normal", skipme=True)
        assert killed >= 1
        with pytest.raises((RedisConnectionError, ConnectionError)):
            await link(["k"], ["b", 1])
        assert await link(["k"], ["c", 1]) == [b"k", b"c", 2]
    finally:
        await link.close()


async def test_an_error_in_the_script_keeps_the_connection(redis_client: aioredis.Redis) -> None:
    link = ScriptLink(redis_client, "if ARGV[1] == 'bad' then return redis.error_reply('no') end")
    try:
        await link(["k"], ["good"])
        before = {c["id"] for c in await redis_client.client_list()}
        with pytest.raises(ResponseError, match="no"):
            await link(["k"], ["bad"])
        await link(["k"], ["good"])
        assert {c["id"] for c in await redis_client.client_list()} == before  # not reconnected
    finally:
        await link.close()
