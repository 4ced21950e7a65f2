"""Both planes on a real 3-master Redis Cluster (docs/operations.md, "Redis topologies"): a
table published through the admin API and served by a data plane, rollback and history,
the live page's read of every replica's state, in-flight sharing and breaker announcements.
Both planes are given one node that does not own the table's slot, so a plane that ignored
the topology (a plain client on that node) would get MOVED for every table key."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import aiohttp
import pytest
import redis.asyncio as aioredis
from redis.exceptions import MovedError

from contracts.redis_keys import RedisKeys
from contracts.redis_topology import ClientOptions, connect_redis
from data_plane.background_tasks import BackgroundTasks
from data_plane.resilience.endpoint_load import LoadTracker
from data_plane.sync.breaker_announcements import BreakerAnnouncements
from data_plane.sync.in_flight_epochs import group_of
from data_plane.sync.in_flight_sharing import CLUSTER_GROUPS, InFlightSharing
from data_plane.sync.replica_identity import ReplicaIdentity
from demo.redis_cluster import Cluster, running_cluster
from simulator import Fleet, SimFleetConfig, run_fleet
from tests.reliability.admin import AdminClient
from tests.reliability.conftest import ADMIN_TOKEN, StartControlPlane, StartDataPlane
from tests.reliability.stack import (
    CHEAP,
    PRICEY,
    SteadyLoad,
    dp_settings,
    fleet_reports,
    metric,
    report,
    served_name,
    sim_pair,
)
from tests.support.waiting import eventually

pytestmark = pytest.mark.integration
PREFIX = "cluster"
RESUMES_WITHIN_S = (
    15.0  # node timeout 0.5 s: promotion takes about 1-2 s, clients re-learn the slots
)
KEYS = RedisKeys(PREFIX, cluster=True)


@pytest.fixture
async def fleet() -> AsyncIterator[Fleet]:
    config = SimFleetConfig(pairs=[sim_pair(CHEAP), sim_pair(PRICEY)])
    async with run_fleet(config, answers={}) as running:
        yield running


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    with running_cluster() as running:
        yield running


def not_the_owner(cluster: Cluster, key: str) -> int:
    owner = cluster.owner_of(key)
    return next(p for p in cluster.ports if p != owner)


async def test_a_table_is_published_served_and_rolled_back_through_a_non_owner_node(
    cluster: Cluster,
    fleet: Fleet,
    snapshot: Path,
    start_data_plane: StartDataPlane,
    start_control_plane: StartControlPlane,
) -> None:
    owner, other = cluster.owner_of(KEYS.table_current), not_the_owner(cluster, KEYS.table_current)
    url = cluster.node_url(other)
    urls = {q: [fleet.url(served_name(q))] for q in (CHEAP, PRICEY)}
    async with aiohttp.ClientSession() as session:
        admin = AdminClient(session, await start_control_plane(url, PREFIX), ADMIN_TOKEN)
        for r in fleet_reports(urls):
            await admin.push(r)
        status, _, body = await admin.publish()
        assert (status, body["version"]) == (201, 1), body
        # No poll within the test: a new table reaches the plane on the sharded event alone.
        settings = dp_settings(url, PREFIX, snapshot, table_poll_interval_s=600)
        plane = await start_data_plane(settings)
        await eventually(lambda: plane.version == 1, what="v1 loaded from the cluster")

        async with SteadyLoad(plane.url) as load:
            await load.answered(20)
            await admin.push(report(CHEAP, urls[CHEAP], price_bump=0.01))
            status, _, body = await admin.publish()
            assert (status, body["version"], body["previous_version"]) == (201, 2, 1), body
            await eventually(lambda: plane.version == 2, what="v2 followed")
            status, _, body = await admin.call("POST", "/v1/tables/rollback", {"version": 1})
            assert status == 200, body
            await eventually(lambda: plane.version == 1, what="rollback followed")
            await load.answered(20)
        assert load.tally.problems == [], load.tally.problems[:5]
        assert await admin.history() == (1, [2, 1])
        # Followed on events, never through a reconnect's catch-up read.
        failures = "gearbox_routing_table_load_failures_total"
        assert metric(plane.app, failures, reason="redis_unavailable") == 0

        # The keys are where the cluster says: on the slot's owner, which a plain client on
        # the node the planes were given is sent away from.
        async with aioredis.Redis(port=owner) as direct:
            assert await direct.get(KEYS.table_current) == b"1"
        async with aioredis.Redis(port=other) as plain:
            with pytest.raises(MovedError, match=f"127.0.0.1:{owner}"):
                await plain.get(KEYS.table_current)

        # The live page reads every replica's state with one MGET on the states' slot.
        async def one_instance_live() -> bool:
            status, _, body = await admin.call("GET", "/ui/api/live")
            return status == 200 and len(body["instances"]) == 1

        await eventually(one_instance_live, what="the live page read the replica's state")


async def test_in_flight_sharing_and_breaker_announcements_work_on_a_cluster(
    cluster: Cluster,
) -> None:
    keys = RedisKeys("cluster-sharing", cluster=True)
    url = cluster.node_url(not_the_owner(cluster, keys.in_flight_group(0, CLUSTER_GROUPS).index))
    clients = [connect_redis(url, ClientOptions(1.0)) for _ in range(2)]
    trackers = [LoadTracker(), LoadTracker()]
    heard: list[tuple[str, float]] = []
    ids = [ReplicaIdentity(f"dp-{n}", lambda: None, time.monotonic) for n in "ab"]
    sharing = [
        InFlightSharing(
            keys,
            ids[i],
            t.in_flight_all,
            t.set_peers_in_flight,
            1.0,
            time.monotonic,
            groups=CLUSTER_GROUPS,
        )
        for i, t in enumerate(trackers)
    ]
    listener = BreakerAnnouncements(
        keys.breaker_events, ids[0], lambda e, s: heard.append((e, s)), 5.0
    )
    sender = BreakerAnnouncements(keys.breaker_events, ids[1], lambda e, s: None, 5.0)
    trackers[1].acquire("cheap#0")
    background = BackgroundTasks()
    for n, (s, c) in enumerate(zip(sharing, clients, strict=True)):
        background.start(f"sharing-{n}", s.run(c, 0.02))
    background.start("listen", listener.listen_forever(clients[0]))
    background.start("send", sender.send_forever(clients[1]))
    try:
        await eventually(
            lambda: trackers[0].peers_in_flight() == {"cheap#0": 1.0},
            timeout_s=30.0,
            what="peer counts",
        )

        def announced() -> bool:
            sender.announce("cheap#0", 2.0)  # until the listener has subscribed
            return bool(heard)

        await eventually(announced, timeout_s=30.0, what="announcement heard")
        assert heard[0] == ("cheap#0", 2.0)
    finally:
        # The data plane's own shutdown: it cancels again until each task has ended, since on
        # Python 3.11 redis-py can swallow a cancel (CPython gh-86296). With one cancel, this
        # cleanup hung past pytest's 300 s in a full-suite run; under load (three copies at
        # once, load average 14) 2 of 3 runs left both sharing loops "cancelling" in their
        # sleep after 20 s.
        async with asyncio.timeout(20.0):
            await background.stop(*background.tasks)
            for client in clients:
                await client.aclose()


async def test_in_flight_sharing_resumes_after_a_master_with_a_replica_dies() -> None:
    """3 masters + 3 replicas; two replicas share counts over 3 groups (one per master); the
    master holding group 0 is killed while they exchange every 20 ms. Within the stated
    time a count changed after the kill, in the dead master's group, reaches the other
    replica, and the other groups' counts are there again (docs/data_plane.md,
    "In-flight sharing")."""
    keys = RedisKeys("failover-sharing", cluster=True)
    with running_cluster(masters=3, replicas=1) as cluster:
        clients = [connect_redis(cluster.url, ClientOptions(1.0)) for _ in range(2)]
        trackers = [LoadTracker(), LoadTracker()]
        ids = [ReplicaIdentity(f"dp-{n}", lambda: None, time.monotonic) for n in "ab"]
        sharing = [
            InFlightSharing(
                keys,
                ids[i],
                t.in_flight_all,
                t.set_peers_in_flight,
                2.0,
                time.monotonic,
                groups=CLUSTER_GROUPS,
            )
            for i, t in enumerate(trackers)
        ]
        # One endpoint in each group, so every master carries a count.
        endpoints = {group_of(f"e-{i}#0", CLUSTER_GROUPS): f"e-{i}#0" for i in range(64)}
        assert sorted(endpoints) == [0, 1, 2]
        for endpoint in endpoints.values():
            trackers[1].acquire(endpoint)
        tasks = [asyncio.create_task(s.run(c, 0.02)) for s, c in zip(sharing, clients, strict=True)]
        try:
            everywhere = {e: 1.0 for e in endpoints.values()}
            await eventually(
                lambda: trackers[0].peers_in_flight() == everywhere, timeout_s=30.0, what="counts"
            )
            victim = cluster.owner_of(keys.in_flight_group(0, CLUSTER_GROUPS).index)
            killed_at = time.monotonic()
            cluster.kill(victim)
            trackers[1].acquire(endpoints[0])  # a change in the dead master's group
            after = {**everywhere, endpoints[0]: 2.0}
            await eventually(
                lambda: trackers[0].peers_in_flight() == after,
                timeout_s=RESUMES_WITHIN_S,
                what="the change after the failover",
            )
            resumed_s = time.monotonic() - killed_at
            assert cluster.owner_of(keys.in_flight_group(0, CLUSTER_GROUPS).index) != victim
            print(f"sharing resumed {resumed_s:.2f} s after the master was killed")
        finally:
            async with asyncio.timeout(20.0):
                for task in tasks:
                    task.cancel()
                await asyncio.gather(*tasks, return_exceptions=True)
                for client in clients:
                    await client.aclose()
