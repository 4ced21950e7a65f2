"""Commands a `CommandLink` sends to a real 3-master Redis Cluster (data_plane/sync/
cluster_link.py): each to its key's slot owner, one round trip per node, and a batch that
loses a node's connection fails whole, with no command sent twice (in-flight sharing adds
with BITFIELD INCRBY: a batch sent again would count a replica's changes twice)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import pytest
import redis
import redis.asyncio as aioredis
from redis.exceptions import ConnectionError as RedisConnectionError

from contracts.redis_topology import ClientOptions, connect_redis
from data_plane.sync.command_link import CommandLink
from demo.redis_cluster import Cluster, running_cluster

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    with running_cluster() as running:
        yield running


@pytest.fixture
async def client(cluster: Cluster) -> AsyncIterator[aioredis.Redis]:
    made = connect_redis(cluster.url, ClientOptions(5.0))
    try:
        yield made
    finally:
        await made.aclose()


def _keys_on_two_masters(cluster: Cluster, name: str) -> tuple[str, str, int]:
    """Two keys whose slots two different masters own, and the second one's port."""
    first = f"{{{name}-0}}"
    owner = cluster.owner_of(first)
    other = next(
        f"{{{name}-{i}}}" for i in range(1, 200) if cluster.owner_of(f"{{{name}-{i}}}") != owner
    )
    return first, other, cluster.owner_of(other)


async def test_each_command_goes_to_its_owner_in_one_round_trip_per_node(
    cluster: Cluster, client: aioredis.Redis
) -> None:
    a, b, b_port = _keys_on_two_masters(cluster, "route")
    link = CommandLink(client)
    try:
        await link([("SET", a, "x"), ("SET", b, "y")])  # connected to both owners
        with redis.Redis(port=b_port) as node:
            before = int(node.info("stats")["total_reads_processed"])  # this INFO's read too
            replies = await link([("GET", a), ("SADD", f"{b}:s", "m"), ("GET", b)])
            after = int(node.info("stats")["total_reads_processed"])
        assert replies == [b"x", 1, b"y"]  # in the batch's order, from two masters
        assert after - before == 2  # b's two commands in one read, then this INFO's
    finally:
        await link.close()


async def test_a_script_call_goes_to_its_keys_owner(
    cluster: Cluster, client: aioredis.Redis
) -> None:
    """A script names its key third (EVAL body numkeys key): routed by the body, as a plain
    command by its first argument, it met a master that does not own the key (MOVED)."""
    a, b, _ = _keys_on_two_masters(cluster, "script")
    script = "return redis.call('INCRBY', KEYS[1], ARGV[1])"
    link = CommandLink(client)
    try:
        for key in (a, b):  # whichever master the body's own slot would pick, one is wrong
            assert await link([("EVAL", script, 1, key, 5), ("GET", key)]) == [5, b"5"]
    finally:
        await link.close()


async def test_a_lost_node_connection_fails_the_batch_and_the_next_reconnects(
    cluster: Cluster, client: aioredis.Redis
) -> None:
    a, b, b_port = _keys_on_two_masters(cluster, "lost")
    link = CommandLink(client)
    try:
        assert await link([("INCRBY", a, 1), ("INCRBY", b, 1)]) == [1, 1]
        with redis.Redis(port=b_port) as node:  # every client of b's owner but this one
            assert node.client_kill_filter(_type="normal", skipme=True) >= 1
        with pytest.raises((RedisConnectionError, ConnectionError)):
            await link([("INCRBY", a, 1), ("INCRBY", b, 1)])
        assert await link([("INCRBY", a, 1), ("INCRBY", b, 1)]) == [3, 2]  # a's sent once
    finally:
        await link.close()


async def test_a_master_that_does_not_answer_in_time_fails_the_batch_sent_once(
    cluster: Cluster,
) -> None:
    """redis-py's cluster pipeline waited out the pause (1 s past its 0.3 s timeout)."""
    a, b, b_port = _keys_on_two_masters(cluster, "slow")
    client = connect_redis(cluster.url, ClientOptions(0.3))
    link = CommandLink(client)
    try:
        assert await link([("INCRBY", a, 1), ("INCRBY", b, 1)]) == [1, 1]
        with redis.Redis(port=b_port) as node:  # b's owner holds writes for 1.3 s
            assert node.execute_command("CLIENT", "PAUSE", 1300, "WRITE")
        with pytest.raises(TimeoutError):
            await link([("INCRBY", a, 1), ("INCRBY", b, 1)])
        with redis.Redis(port=cluster.owner_of(a)) as owner:
            assert owner.get(a) == b"2"  # the failed batch reached a's owner once
    finally:
        await link.close()
        await client.aclose()
