"""Redis and control-plane faults: an outage under load, a data plane restarted during the
outage, and a publisher that dies between writing a version and moving the pointer."""

from __future__ import annotations

import asyncio
import signal
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest
import redis.asyncio as aioredis

from contracts.redis_keys import RedisKeys
from control_plane.settings import PublisherOptions
from control_plane.store.publisher import Publisher
from control_plane.store.redis_connection import make_redis
from simulator import Fleet, SimFleetConfig, run_fleet
from tests.reliability.admin import AdminClient
from tests.reliability.conftest import (
    ADMIN_TOKEN,
    StartControlPlane,
    StartDataPlane,
    cp_settings,
)
from tests.reliability.processes import Child, DataPlaneProcess, PersistentRedis
from tests.reliability.stack import (
    CHEAP,
    PRICEY,
    SteadyLoad,
    chat_body,
    dp_settings,
    fleet_reports,
    fleet_table,
    metric,
    report,
    served_name,
    sim_pair,
)
from tests.support.redis_server import RedisProcess
from tests.support.waiting import eventually

pytestmark = pytest.mark.integration


@pytest.fixture
async def fleet() -> AsyncIterator[Fleet]:
    config = SimFleetConfig(pairs=[sim_pair(CHEAP), sim_pair(PRICEY)])
    async with run_fleet(config, answers={}) as running:
        yield running


def urls_of(fleet: Fleet) -> dict[str, list[str]]:
    return {q: [fleet.url(served_name(q))] for q in (CHEAP, PRICEY)}


async def readyz(admin: AdminClient) -> bool:
    return (await admin.call("GET", "/readyz", auth=False))[0] == 200


async def test_redis_outage_under_load_loses_no_request_and_no_version(
    tmp_path: Path,
    children: list[Child],
    fleet: Fleet,
    snapshot: Path,
    start_data_plane: StartDataPlane,
    start_control_plane: StartControlPlane,
) -> None:
    redis = PersistentRedis(tmp_path)  # production Redis persists; a restart keeps the data
    children.append(redis)
    await redis.start()
    prefix, urls = "outage", urls_of(fleet)
    async with aiohttp.ClientSession() as session:
        admin = AdminClient(session, await start_control_plane(redis.url, prefix), ADMIN_TOKEN)
        for r in fleet_reports(urls):
            await admin.push(r)
        status, _, body = await admin.publish()
        assert (status, body["version"]) == (201, 1)
        plane = await start_data_plane(dp_settings(redis.url, prefix, snapshot))
        await eventually(lambda: plane.version == 1, what="v1 loaded")

        async with SteadyLoad(plane.url) as load:
            await load.answered(30)
            await redis.stop()

            # The control plane says so: a 503 naming Redis, not ready, redis_up 0.
            status, headers, body = await admin.publish()
            assert status == 503, body
            assert body["error"]["code"] == "redis_unavailable"
            assert int(headers["Retry-After"]) >= 1
            status, _, body = await admin.call("GET", "/readyz", auth=False)
            assert (status, body["redis"]) == (503, False)
            assert await admin.metric("gearbox_cp_redis_up") == 0.0

            await eventually(
                lambda: (
                    metric(
                        plane.app,
                        "gearbox_routing_table_load_failures_total",
                        reason="redis_unavailable",
                    )
                    >= 1
                ),
                what="the data plane noticed the outage",
            )
            await load.answered(100)  # clients are served through the outage
            assert plane.version == 1

            await redis.start()
            await eventually(lambda: readyz(admin), timeout_s=10, what="control plane ready")
            await admin.push(report(CHEAP, urls[CHEAP], price_bump=0.01))
            status, _, body = await admin.publish()
            assert status == 201, body
            assert (body["version"], body["previous_version"]) == (2, 1)
            await eventually(lambda: plane.version == 2, timeout_s=10, what="v2 followed")
            await load.answered(30)

        assert load.tally.problems == [], load.tally.problems[:5]
        assert set(load.tally.versions) == {"1", "2"}
        assert await admin.history() == (2, [2, 1])  # none lost, none twice
        hashes = {(await admin.call("GET", f"/v1/tables/{v}"))[2]["content_sha256"] for v in (1, 2)}
        assert len(hashes) == 2
        assert await admin.metric("gearbox_cp_redis_up") == 1.0


async def test_data_plane_restarted_during_a_redis_outage_serves_its_snapshot(
    tmp_path: Path, children: list[Child], fleet: Fleet, snapshot: Path
) -> None:
    redis = PersistentRedis(tmp_path)
    children.append(redis)
    await redis.start()
    keys, urls = RedisKeys("snap"), urls_of(fleet)
    client = make_redis(cp_settings(redis.url, keys.prefix, redis_retries=1))  # as in production
    publisher = Publisher(client, keys, PublisherOptions())
    flags = {
        "redis_url": redis.url,
        "redis_key_prefix": keys.prefix,
        "table_snapshot_path": str(snapshot),
        "table_poll_interval_s": "0.2",
        "redis_timeout_s": "0.5",
        "redis_backoff_max_s": "0.3",
    }
    plane = DataPlaneProcess(flags, tmp_path)
    children.append(plane)
    try:
        first = await publisher.publish(fleet_table(urls))
        await plane.start()
        async with aiohttp.ClientSession() as session:

            async def serving(version: int) -> bool:
                try:
                    async with session.get(plane.url + "/readyz") as resp:
                        return bool((await resp.json())["table_version"] == version)
                except aiohttp.ClientConnectionError:
                    return False

            await eventually(lambda: serving(first.version), timeout_s=30, what="first load")
            await eventually(snapshot.exists, what="snapshot written")
            await redis.stop()
            await plane.kill()  # a crash, mid-outage
            await plane.start()
            await eventually(lambda: serving(first.version), timeout_s=30, what="from snapshot")
            for _ in range(10):
                async with session.post(plane.url + "/v1/chat/completions", json=chat_body()) as r:
                    assert r.status == 200, await r.text()
                    assert r.headers["X-Route-Table-Version"] == str(first.version)

            await redis.start()
            second = await publisher.publish(fleet_table(urls, price_bump=0.01))
            await eventually(lambda: serving(second.version), timeout_s=15, what="follows Redis")
    finally:
        await client.aclose()
    messages = [str(line["message"]) for line in plane.log_lines()]
    assert any(f"routing table v{first.version} from snapshot" in m for m in messages)
    assert any(m.startswith("redis unavailable") for m in messages)


async def test_publisher_crash_between_version_and_pointer_keeps_the_previous_table(
    tmp_path: Path,
    fleet: Fleet,
    redis_server: RedisProcess,
    redis_keys: RedisKeys,
    redis_client: aioredis.Redis,
    snapshot: Path,
    start_data_plane: StartDataPlane,
    start_control_plane: StartControlPlane,
) -> None:
    urls = urls_of(fleet)
    async with aiohttp.ClientSession() as session:
        cp_url = await start_control_plane(redis_server.url, redis_keys.prefix)
        admin = AdminClient(session, cp_url, ADMIN_TOKEN)
        for r in fleet_reports(urls):
            await admin.push(r)
        status, _, body = await admin.publish()
        assert status == 201, body
        first = body["version"]
        plane = await start_data_plane(dp_settings(redis_server.url, redis_keys.prefix, snapshot))
        await eventually(lambda: plane.version == first, what="first table loaded")

        table_file = tmp_path / "next-table.json"
        table_file.write_text(fleet_table(urls, price_bump=0.02).model_dump_json())
        crash = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "tests.reliability.crashing_publisher",
            redis_server.url,
            redis_keys.prefix,
            str(table_file),
            stderr=asyncio.subprocess.PIPE,
        )
        _, err = await asyncio.wait_for(crash.communicate(), timeout=60)
        assert crash.returncode == -signal.SIGKILL, err.decode()
        crashed_at = time.time()
        orphan = first + 1
        assert await redis_client.get(redis_keys.table_version(orphan)) is not None  # written
        assert await redis_client.get(redis_keys.table_current) == str(first).encode()

        def polled_since_crash() -> bool:
            last = metric(plane.app, "gearbox_routing_table_last_load_timestamp_seconds")
            return last > crashed_at

        await eventually(polled_since_crash, what="the data plane checked the pointer again")
        assert plane.version == first
        assert await admin.history() == (first, [first])
        status, _, body = await admin.call("GET", "/v1/tables/current")
        assert (status, body["version"]) == (200, first)

        # The next publish waits out the dead publisher's lock and succeeds.
        await admin.push(report(CHEAP, urls[CHEAP], price_bump=0.03))
        status, _, body = await admin.publish()
        assert status == 201, body
        assert (body["version"], body["previous_version"]) == (orphan + 1, first)
        await eventually(lambda: plane.version == orphan + 1, what="next table followed")
        assert await admin.history() == (orphan + 1, [orphan + 1, first])
        assert await redis_client.get(redis_keys.table_version(orphan)) is None  # trimmed
