"""One Lua script run again and again over a Redis connection of its own.

A loop that calls one script every few milliseconds (in-flight sharing: 40 times a second by
default, docs/data_plane.md "In-flight sharing") spent about a third of its CPU in redis-py's
client layer: taking a connection from the pool and giving it back, the retry wrapper, the
response callbacks. A `ScriptLink` keeps one connection, made by the client's pool with the
client's settings (address, credentials, TLS, timeouts), and sends `EVALSHA` on it directly.
A script missing from Redis's cache (a restart, `SCRIPT FLUSH`) is run once with `EVAL`, which
caches it again. After any other failure the connection is closed (a reply may still be on
its way) and the next call opens a new one. A Redis Cluster's client routes each call to
the keys' slot owner itself (`EVALSHA` through the client, which follows redirects).
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Sequence
from typing import Any

import redis.asyncio as aioredis
from redis.asyncio.cluster import RedisCluster
from redis.asyncio.connection import AbstractConnection, ConnectionPool
from redis.exceptions import NoScriptError, ResponseError

from contracts.redis_topology import as_cluster

Arg = str | bytes | int | float


def _bulk(arg: Arg) -> bytes:
    """One RESP bulk string, encoded as redis-py encodes it (str UTF-8, int str, float repr)."""
    if isinstance(arg, bytes):
        data = arg
    elif isinstance(arg, str):
        data = arg.encode()
    else:
        data = (repr(arg) if isinstance(arg, float) else str(arg)).encode()
    return b"$%d\r\n%s\r\n" % (len(data), data)


def pack_evalsha(sha: str, keys: Sequence[Arg], args: Sequence[Arg]) -> bytes:
    """`EVALSHA sha numkeys keys... args...` as one RESP command (PURE). redis-py's general
    packer spent 40% of an exchange's client CPU on in-flight sharing's calls (cProfile, 8
    calls of ~20 arguments each)."""
    parts = [b"*%d\r\n$7\r\nEVALSHA\r\n" % (3 + len(keys) + len(args)), _bulk(sha)]
    parts.append(_bulk(len(keys)))
    parts += map(_bulk, keys)
    parts += map(_bulk, args)
    return b"".join(parts)


class ScriptLink:
    """Calls `script` with keys and args, as `AsyncScript` does, on a connection of its own."""

    def __init__(self, client: aioredis.Redis, script: str) -> None:
        # A cluster's client has a pool per node: it sends the script to its keys' slot owner
        # itself (the keys share one hash tag) and follows redirects after a failover.
        self._cluster = as_cluster(client)
        self._pool = None if self._cluster is not None else client.connection_pool
        self._script = script
        self._sha = hashlib.sha1(script.encode(), usedforsecurity=False).hexdigest()
        self._conn: AbstractConnection | None = None

    async def __call__(self, keys: Sequence[Arg], args: Sequence[Arg]) -> Any:
        if self._cluster is not None:
            return await self._call_cluster(self._cluster, keys, args)
        assert self._pool is not None  # one of the two is set
        conn = self._conn or await self._open(self._pool)
        try:
            try:
                await conn.send_command("EVALSHA", self._sha, len(keys), *keys, *args)
                return await conn.read_response()
            except NoScriptError:
                await conn.send_command("EVAL", self._script, len(keys), *keys, *args)
                return await conn.read_response()
        except ResponseError:
            raise  # the script failed in Redis; the connection is in step
        except BaseException:  # an error or a cancel: a reply may still be on its way
            self._conn = None
            await conn.disconnect(nowait=True)
            raise

    async def batch(self, calls: Sequence[tuple[Sequence[Arg], Sequence[Arg]]]) -> list[Any]:
        """Each (keys, args) call, in order; on one connection all in one round trip (one
        write, then the replies as they come), on a cluster each to its slot's owner."""
        if self._cluster is not None:
            cluster = self._cluster
            return list(
                await asyncio.gather(*(self._call_cluster(cluster, k, a) for k, a in calls))
            )
        assert self._pool is not None  # one of the two is set
        conn = self._conn or await self._open(self._pool)
        try:
            replies, missing = await self._pipelined(conn, calls)
            if missing:  # not in Redis's cache: load it once, then call again
                await conn.send_command("SCRIPT", "LOAD", self._script)
                await conn.read_response()
                replies, missing = await self._pipelined(conn, calls)
        except BaseException:  # an error or a cancel: a reply may still be on its way
            self._conn = None
            await conn.disconnect(nowait=True)
            raise
        if missing:
            raise NoScriptError("the script is missing right after SCRIPT LOAD")
        return replies

    async def _pipelined(
        self, conn: AbstractConnection, calls: Sequence[tuple[Sequence[Arg], Sequence[Arg]]]
    ) -> tuple[list[Any], bool]:
        """Send every call, read every reply (an error reply is read whole, so the connection
        stays in step); the first error other than a missing script is raised after."""
        sha = self._sha
        await conn.send_packed_command(b"".join(pack_evalsha(sha, k, a) for k, a in calls))
        replies: list[Any] = []
        missing, failed = False, None
        for _ in calls:
            try:
                replies.append(await conn.read_response())
            except NoScriptError:
                missing = True
            except ResponseError as err:
                failed = failed or err
        if failed is not None:
            raise failed
        return replies, missing

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

    async def _call_cluster(
        self, cluster: RedisCluster, keys: Sequence[Arg], args: Sequence[Arg]
    ) -> Any:
        try:
            return await cluster.evalsha(self._sha, len(keys), *keys, *args)
        except NoScriptError:
            return await cluster.eval(self._script, len(keys), *keys, *args)

    async def close(self) -> None:
        """Close the connection (the next call opens another)."""
        conn, self._conn = self._conn, None
        if conn is not None:
            await conn.disconnect()
