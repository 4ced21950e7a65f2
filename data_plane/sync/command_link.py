"""Plain Redis commands sent again and again over a Redis connection of its own.

A loop that sends a few commands every few milliseconds (in-flight sharing: 40 times a second
by default, docs/data_plane.md "In-flight sharing") spent about a third of its CPU in redis-py's
client layer: taking a connection from the pool and giving it back, the retry wrapper, the
response callbacks. A `CommandLink` keeps one connection, made by the client's pool with the
client's settings (address, credentials, TLS, timeouts), and sends each batch of commands on
it in one write, then reads the replies as Redis sends them (raw: bytes, lists, integers),
parsed from one receive buffer (`resp_wire.py`), within the client's socket timeout.
After any failure other than an error reply the connection is closed (a reply may still be
on its way) and the next batch opens a new one. A Redis Cluster's client gets the same per
master (`cluster_link.py`): each command to its key's slot owner, one round trip per master.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import redis.asyncio as aioredis
from redis.asyncio.connection import AbstractConnection, ConnectionPool
from redis.exceptions import ResponseError

from contracts.redis_topology import as_cluster
from data_plane.sync.cluster_link import ClusterLink
from data_plane.sync.resp_wire import Arg, Command, Packed, pack_commands, receive

__all__ = ["Arg", "Command", "CommandLink", "Packed", "pack_commands"]


class CommandLink:
    """Sends batches of commands, as a non-transactional pipeline would, on a connection of
    its own; the replies in order, the first error reply raised after all were read."""

    def __init__(self, client: aioredis.Redis) -> None:
        cluster = as_cluster(client)
        self._cluster = None if cluster is None else ClusterLink(cluster)
        self._pool = None if cluster is not None else client.connection_pool
        self._conn: AbstractConnection | None = None

    async def __call__(self, commands: Sequence[Command]) -> list[Any]:
        if self._cluster is not None:
            return await self._cluster(commands)
        assert self._pool is not None  # one of the two is set
        conn = self._conn or await self._open(self._pool)
        try:
            await conn.send_packed_command(pack_commands(commands))
            async with asyncio.timeout(conn.socket_timeout):
                replies = await receive(conn, len(commands))
        except BaseException:  # an error or a cancel: a reply may still be on its way
            self._conn = None
            await conn.disconnect(nowait=True)
            raise
        for reply in replies:  # each error reply was read whole: the connection is in step
            if isinstance(reply, ResponseError):
                raise reply
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

    async def close(self) -> None:
        """Close the connection(s) (the next batch opens others)."""
        if self._cluster is not None:
            await self._cluster.close()
        conn, self._conn = self._conn, None
        if conn is not None:
            await conn.disconnect()
