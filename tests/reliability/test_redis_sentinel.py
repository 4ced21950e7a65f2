"""Both planes on a real Sentinel group (a master, a replica, three sentinels; docs/operations.md,
"Redis topologies"): the master is killed under load and the sentinels promote the replica.
The data plane keeps serving its table (no failed request), the control plane answers 503 +
Retry-After until the new master answers and then publishes the next version, and in-flight
sharing and breaker announcements resume on the new master. A plane that ignored the
topology (a client on the first master's address) would stay on the dead master."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest
import redis

from contracts.redis_keys import RedisKeys
from contracts.redis_topology import ClientOptions, connect_redis
from data_plane.background_tasks import BackgroundTasks
from data_plane.resilience.endpoint_load import LoadTracker
from data_plane.sync.breaker_announcements import BreakerAnnouncements
from data_plane.sync.in_flight_sharing import InFlightSharing
from data_plane.sync.replica_identity import ReplicaIdentity
from demo.redis_cluster import stop
from simulator import Fleet, SimFleetConfig, run_fleet
from tests.reliability.admin import AdminClient
from tests.reliability.conftest import ADMIN_TOKEN, StartControlPlane, StartDataPlane
from tests.reliability.stack import (
    CHEAP,
    PRICEY,
    SteadyLoad,
    dp_settings,
    fleet_reports,
    report,
    served_name,
    sim_pair,
)
from tests.support.redis_topologies import SentinelGroup, running_sentinels
from tests.support.waiting import eventually

pytestmark = pytest.mark.integration
# down-after 500 ms, then the sentinels' vote and the promotion: about 1-3 s here.
FAILOVER_S = 20.0
RESUME_S = 10.0  # after the promotion, for sharing and announcements to work again


@pytest.fixture
async def fleet() -> AsyncIterator[Fleet]:
    config = SimFleetConfig(pairs=[sim_pair(CHEAP), sim_pair(PRICEY)])
    async with run_fleet(config, answers={}) as running:
        yield running


def crash_master(group: SentinelGroup) -> None:
    """Kill the master once the replica holds all it wrote (replication is asynchronous: a
    write in the last moment before a crash can be lost; docs/runbooks.md,
    GearboxControlPlaneRedisDown)."""
    with redis.Redis(port=group.master_port) as master:
        assert master.execute_command("WAIT", 1, 2000) == 1
    stop(group.master)


async def promoted(group: SentinelGroup) -> None:
    await eventually(
        lambda: group.current_master() == group.replica_port,
        timeout_s=FAILOVER_S,
        interval_s=0.05,
        what="the sentinels promoted the replica",
    )


async def test_a_master_killed_under_load_loses_no_request_and_no_version(
    fleet: Fleet,
    snapshot: Path,
    start_data_plane: StartDataPlane,
    start_control_plane: StartControlPlane,
) -> None:
    prefix, urls = "sentinel", {q: [fleet.url(served_name(q))] for q in (CHEAP, PRICEY)}
    with running_sentinels() as group:
        async with aiohttp.ClientSession() as session:
            cp_url = await start_control_plane(group.url, prefix)
            admin = AdminClient(session, cp_url, ADMIN_TOKEN)
            for r in fleet_reports(urls):
                await admin.push(r)
            status, _, body = await admin.publish()
            assert (status, body["version"]) == (201, 1), body
            plane = await start_data_plane(dp_settings(group.url, prefix, snapshot))
            await eventually(lambda: plane.version == 1, what="v1 loaded")

            async with SteadyLoad(plane.url) as load:
                await load.answered(30)
                crash_master(group)
                # Before the sentinels agree (down-after 500 ms), the master they name is dead.
                status, headers, body = await admin.publish()
                assert status == 503, body
                assert body["error"]["code"] == "redis_unavailable"
                assert int(headers["Retry-After"]) >= 1
                await load.answered(30)  # served from the table through the failover
                await promoted(group)

                new_report = report(CHEAP, urls[CHEAP], price_bump=0.01).model_dump(mode="json")

                async def published() -> bool:
                    """A pooled connection to the dead master fails once more: 503, retried."""
                    status, _, body = await admin.call("POST", "/v1/profiles", new_report)
                    if status == 503:
                        return False
                    assert status in (200, 201), body
                    status, _, body = await admin.publish()
                    assert status in (201, 503), body
                    return status == 201

                await eventually(published, timeout_s=RESUME_S, what="publishing again")
                await eventually(lambda: plane.version == 2, timeout_s=RESUME_S, what="v2")
                await load.answered(30)

            assert load.tally.problems == [], load.tally.problems[:5]
            assert set(load.tally.versions) == {"1", "2"}
            assert await admin.history() == (2, [2, 1])  # none lost, none twice
            with redis.Redis(port=group.replica_port) as new_master:
                assert new_master.get(f"{prefix}:rt:current") == b"2"


async def test_sharing_and_announcements_resume_on_the_new_master() -> None:
    keys = RedisKeys("sentinel-sharing")
    with running_sentinels() as group:
        clients = [connect_redis(group.url, ClientOptions(0.5)) for _ in range(2)]
        trackers = [LoadTracker(), LoadTracker()]
        heard: list[str] = []
        ids = [ReplicaIdentity(f"dp-{n}", lambda: None, time.monotonic) for n in "ab"]
        sharing = [
            InFlightSharing(
                keys, ids[i], t.in_flight_all, t.set_peers_in_flight, 2.0, time.monotonic
            )
            for i, t in enumerate(trackers)
        ]
        listener = BreakerAnnouncements(
            keys.breaker_events, ids[0], lambda e, s: heard.append(e), 5.0
        )
        sender = BreakerAnnouncements(keys.breaker_events, ids[1], lambda e, s: None, 5.0)
        background = BackgroundTasks()
        for n, (s, c) in enumerate(zip(sharing, clients, strict=True)):
            background.start(f"sharing-{n}", s.run(c, 0.05))
        background.start("listen", listener.listen_forever(clients[0]))
        background.start("send", sender.send_forever(clients[1]))

        async def shared_and_heard(endpoint: str) -> None:
            trackers[1].acquire(endpoint)

            def announced() -> bool:
                sender.announce(endpoint, 1.0)  # again until heard: pub/sub is at most once
                return endpoint in heard

            await eventually(
                lambda: endpoint in trackers[0].peers_in_flight(),
                timeout_s=RESUME_S,
                what=f"{endpoint} shared",
            )
            await eventually(announced, timeout_s=RESUME_S, what=f"{endpoint} announced")

        try:
            await shared_and_heard("before#0")
            crash_master(group)
            await promoted(group)
            promoted_at = time.monotonic()
            await shared_and_heard("after#0")
            resumed_s = time.monotonic() - promoted_at
            print(f"sharing and announcements resumed {resumed_s:.2f} s after the promotion")
        finally:
            # Cancelled again until each task ends, as the data plane's shutdown does (a
            # single cancel can be swallowed by redis-py on Python 3.11: test_redis_cluster.py)
            async with asyncio.timeout(20.0):
                await background.stop(*background.tasks)
                for client in clients:
                    await client.aclose()
