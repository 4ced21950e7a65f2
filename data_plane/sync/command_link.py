"""Plain Redis commands sent again and again over a Redis connection of its own.

A loop that sends a few commands every few milliseconds (in-flight sharing: 40 times a second
by default, docs/data_plane.md "In-flight sharing") spent about a third of its CPU in redis-py's
client layer: taking a connection from the pool and giving it back, the retry wrapper, the
response callbacks. A `CommandLink` keeps one connection, made by the client's pool with the
client's settings (address, credentials, TLS, timeouts), and sends each batch of commands on
it in one write, then reads the replies as Redis sends them (raw: bytes, lists, integers),
parsed from one receive buffer (`resp_replies.py`), within the client's socket timeout.
After any failure other than an error reply the connection is closed (a reply may still be
on its way) and the next batch opens a new one. A Redis Cluster's client sends each batch
through its pipeline, which routes each command to its key's slot owner and follows
redirects after a failover.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import redis.asyncio as aioredis
from redis.asyncio.cluster import RedisCluster
from redis.asyncio.connection import AbstractConnection, ConnectionPool
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import InvalidResponse, ResponseError

from contracts.redis_topology import as_cluster
from data_plane.sync.resp_replies import IncompleteReplyError, parse_replies

Arg = str | bytes | int | float


@dataclass(frozen=True, slots=True)
class Packed:
    """A command packed once and sent many times (a long MGET whose keys rarely change)."""

    args: tuple[Arg, ...]
    resp: bytes

    @classmethod
    def of(cls, *args: Arg) -> Packed:
        return cls(args, pack_commands([args]))


Command = Sequence[Arg] | Packed


def _bulk(arg: Arg) -> bytes:
    """One RESP bulk string, encoded as redis-py encodes it (str UTF-8, int str, float repr)."""
    if isinstance(arg, bytes):
        data = arg
    elif isinstance(arg, str):
        data = arg.encode()
    else:
        data = (repr(arg) if isinstance(arg, float) else str(arg)).encode()
    return b"$%d\r\n%s\r\n" % (len(data), data)


def pack_commands(commands: Sequence[Command]) -> bytes:
    """The commands as RESP, one after the other (PURE). redis-py's general packer spent 40%
    of an exchange's client CPU on in-flight sharing's calls (cProfile, 8 calls of ~20
    arguments each)."""
    parts: list[bytes] = []
    for command in commands:
        if isinstance(command, Packed):
            parts.append(command.resp)
        else:
            parts.append(b"*%d\r\n" % len(command))
            parts += map(_bulk, command)
    return b"".join(parts)


class CommandLink:
    """Sends batches of commands, as a non-transactional pipeline would, on a connection of
    its own; the replies in order, the first error reply raised after all were read."""

    def __init__(self, client: aioredis.Redis) -> None:
        self._cluster = as_cluster(client)
        self._pool = None if self._cluster is not None else client.connection_pool
        self._conn: AbstractConnection | None = None

    async def __call__(self, commands: Sequence[Command]) -> list[Any]:
        if self._cluster is not None:
            return await self._call_cluster(self._cluster, commands)
        assert self._pool is not None  # one of the two is set
        conn = self._conn or await self._open(self._pool)
        try:
            await conn.send_packed_command(pack_commands(commands))
            async with asyncio.timeout(conn.socket_timeout):
                replies = await self._receive(conn, len(commands))
        except BaseException:  # an error or a cancel: a reply may still be on its way
            self._conn = None
            await conn.disconnect(nowait=True)
            raise
        for reply in replies:  # each error reply was read whole: the connection is in step
            if isinstance(reply, ResponseError):
                raise reply
        return replies

    @staticmethod
    async def _receive(conn: AbstractConnection, count: int) -> list[Any]:
        """`count` replies, from one receive buffer (`resp_replies`), not element by element."""
        reader: asyncio.StreamReader | None = getattr(conn, "_reader", None)
        if reader is None:
            raise RedisConnectionError("the connection closed")
        buffer = b""
        while True:
            chunk = await reader.read(1 << 16)
            if not chunk:
                raise RedisConnectionError("Redis closed the connection")
            buffer += chunk
            try:
                replies, used = parse_replies(buffer, count)
            except IncompleteReplyError:
                continue
            if used != len(buffer):
                raise InvalidResponse("more bytes than the replies asked for")
            return replies

    async def _open(self, pool: ConnectionPool) -> AbstractConnection:
        """A new connection, connected as the pool connects its own: a Sentinel's connection
        asks the sentinels for the master there (sending alone dials localhost:6379)."""
        conn: AbstractConnection = pool.make_connection()  # type: ignore[no-untyped-call]
        try:
            await conn.connect()  # type: ignore[no-untyped-call]  # untyped in redis-py
        except BaseException:
            await conn.disconnect(nowait=True)
            raise
        self._conn = conn
        return conn

    @staticmethod
    async def _call_cluster(cluster: RedisCluster, commands: Sequence[Command]) -> list[Any]:
        pipe = cluster.pipeline()
        for command in commands:
            pipe.execute_command(*(command.args if isinstance(command, Packed) else command))  # type: ignore[unused-awaitable]  # queues it
        return list(await pipe.execute())

    async def close(self) -> None:
        """Close the connection (the next batch opens another)."""
        conn, self._conn = self._conn, None
        if conn is not None:
            await conn.disconnect()
