"""`CommandLink`'s Redis Cluster path: each command to its key's slot owner over a connection
of the link's own per master, one write and one receive buffer per master per batch.

redis-py's cluster pipeline resolves a routing policy and the target nodes per command,
starts a task per node, records metrics and parses every reply element by element: about
2.9 ms of a replica's CPU per in-flight exchange at 256 replicas x 1,000 endpoints on 3
shards (12% of a core at 40 exchanges a second, docs/benchmarks.md "Scale"), where the same
exchange on a standalone Redis costs about 0.6 ms. Here the slot of each command's key (its
first argument: every command the link is given names one key there, or a script call's one
key) picks the master from the client's slot map, and the batch goes out as on a standalone
Redis (`command_link.py`).

A batch is sent once. After a connection error, a timeout or a redirection (MOVED, ASK: the
slot moved, a failover) the batch fails whole, the link's connections are closed and the
client re-learns the slot map before the next batch, which goes to the new owners. Unlike
the cluster pipeline it never sends a batch again: a write that may have been applied is
the caller's to account for (in-flight sharing bars the epochs it wrote to).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from redis.asyncio.cluster import ClusterNode, RedisCluster
from redis.asyncio.connection import AbstractConnection
from redis.backoff import NoBackoff
from redis.crc import key_slot
from redis.exceptions import ResponseError
from redis.retry import Retry

from data_plane.sync.resp_wire import Arg, Command, Packed, pack_commands, receive

_REDIRECTS = ("MOVED", "ASK", "TRYAGAIN", "CLUSTERDOWN")
_SCRIPTS = ("EVAL", "EVALSHA")  # a script's first argument is its body, its key the third


def _key(arg: Arg) -> bytes:
    return arg if isinstance(arg, bytes) else str(arg).encode()


class ClusterLink:
    """Sends batches of single-key commands to a cluster's masters, the replies in the
    batch's order, the first error reply raised after all were read."""

    def __init__(self, cluster: RedisCluster) -> None:
        self._cluster = cluster
        self._conns: dict[str, AbstractConnection] = {}
        self._relearn = False  # the slot map is stale (a redirection or a lost master)

    async def __call__(self, commands: Sequence[Command]) -> list[Any]:
        routes = await self._route(commands)
        replies: list[Any] = [None] * len(commands)
        try:
            conns = [await self._connection(node) for node, _ in routes]
            for conn, (_, at) in zip(conns, routes, strict=True):
                await conn.send_packed_command(pack_commands([commands[i] for i in at]))
            async with asyncio.timeout(conns[0].socket_timeout if conns else None):
                for conn, (_, at) in zip(conns, routes, strict=True):
                    for i, reply in zip(at, await receive(conn, len(at)), strict=True):
                        replies[i] = reply
        except BaseException:  # an error or a cancel: a reply may still be on its way
            self._relearn = True
            await self.close()
            raise
        errors = [r for r in replies if isinstance(r, ResponseError)]
        if any(str(e).startswith(_REDIRECTS) for e in errors):
            self._relearn = True
        if errors:
            raise errors[0]
        return replies

    async def _route(self, commands: Sequence[Command]) -> list[tuple[ClusterNode, list[int]]]:
        """Each master with the positions of its commands in the batch."""
        cluster = self._cluster
        if self._relearn:
            await cluster.nodes_manager.initialize()
            self._relearn = False
        else:
            _ = await cluster.initialize()  # a no-op once the client knows the slots
        nodes: dict[str, tuple[ClusterNode, list[int]]] = {}
        for i, command in enumerate(commands):
            args = command.args if isinstance(command, Packed) else command
            key = args[3] if args[0] in _SCRIPTS else args[1]  # a script's one key: KEYS[1]
            node = cluster.nodes_manager.get_node_from_slot(key_slot(_key(key)))
            nodes.setdefault(node.name, (node, []))[1].append(i)
        return list(nodes.values())

    async def _connection(self, node: ClusterNode) -> AbstractConnection:
        conn = self._conns.get(node.name)
        if conn is not None:
            return conn
        kwargs = {**node.connection_kwargs, "retry": Retry(NoBackoff(), 0)}  # never resent
        conn = node.connection_class(**kwargs)
        try:
            await conn.connect()  # type: ignore[no-untyped-call]  # untyped in redis-py
        except BaseException:
            await conn.disconnect(nowait=True)
            raise
        self._conns[node.name] = conn
        return conn

    async def close(self) -> None:
        """Close the connections (the next batch opens others)."""
        conns, self._conns = list(self._conns.values()), {}
        for conn in conns:
            await conn.disconnect(nowait=True)
