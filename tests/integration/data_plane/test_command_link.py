"""Commands sent over a connection of their own (`data_plane/sync/command_link.py`), against a
real redis-server: one batch is one round trip, the link survives losing the connection, and
an error reply leaves it in step."""

from __future__ import annotations

import pytest
import redis.asyncio as aioredis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ResponseError

from data_plane.sync.command_link import CommandLink
from data_plane.sync.resp_wire import pack_commands


def test_commands_are_packed_as_resp() -> None:
    packed = pack_commands([("SET", "k", b"\x00v", "PX", 5), ("MGET", "a", "b")])
    assert packed == (
        b"*5\r\n$3\r\nSET\r\n$1\r\nk\r\n$2\r\n\x00v\r\n$2\r\nPX\r\n$1\r\n5\r\n"
        b"*3\r\n$4\r\nMGET\r\n$1\r\na\r\n$1\r\nb\r\n"
    )


async def test_a_batch_answers_every_command_in_order(redis_client: aioredis.Redis) -> None:
    link = CommandLink(redis_client)
    try:
        replies = await link([("SET", "k", b"\x00\x01"), ("SADD", "s", "x"), ("MGET", "k", "no")])
        assert replies == [b"OK", 1, [b"\x00\x01", None]]
    finally:
        await link.close()


async def test_a_lost_connection_fails_one_batch_and_the_next_reconnects(
    redis_client: aioredis.Redis,
) -> None:
    link = CommandLink(redis_client)
    try:
        assert await link([("ECHO", "a")]) == [b"a"]
        killed = await redis_client.client_kill_filter(_type="normal", skipme=True)
        assert killed >= 1
        with pytest.raises((RedisConnectionError, ConnectionError)):
            await link([("ECHO", "b")])
        assert await link([("ECHO", "c")]) == [b"c"]
    finally:
        await link.close()


async def test_an_error_reply_is_raised_and_keeps_the_connection(
    redis_client: aioredis.Redis,
) -> None:
    link = CommandLink(redis_client)
    try:
        await link([("SET", "str", "v")])
        before = {c["id"] for c in await redis_client.client_list()}
        with pytest.raises(ResponseError, match="WRONGTYPE"):
            await link([("SADD", "str", "x"), ("ECHO", "after")])  # the error, then a reply
        assert await link([("ECHO", "next")]) == [b"next"]  # the reply after it was read
        assert {c["id"] for c in await redis_client.client_list()} == before  # not reconnected
    finally:
        await link.close()
