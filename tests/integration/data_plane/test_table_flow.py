"""Routing tables travel publisher -> Redis -> watcher -> requests; Redis trouble never shows."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import redis.asyncio as aioredis

from contracts.live_state import DataPlaneState
from simulator import Fleet
from tests.integration.data_plane.conftest import MakePlane, Plane, Publishing, fleet_table
from tests.support.redis_server import free_port, running_redis
from tests.support.waiting import eventually

pytestmark = pytest.mark.integration

BODY = json.dumps(
    {"model": "auto", "messages": [{"role": "user", "content": "Say hi."}], "max_tokens": 4}
)


async def chat(plane: Plane, **headers: str) -> tuple[int, str | None, int]:
    resp = await plane.client.post("/v1/chat/completions", data=BODY, headers=headers)
    await resp.read()
    return (
        resp.status,
        resp.headers.get("X-Route-Pair"),
        int(resp.headers.get("X-Route-Table-Version", "0")),
    )


async def test_published_table_is_loaded_and_routes(make_plane: MakePlane, fleet: Fleet) -> None:
    plane = await make_plane()
    assert (await plane.client.get("/readyz")).status == 503
    version = await plane.publisher.publish(fleet_table(fleet))
    await eventually(lambda: plane.version == version, what="table loaded")
    assert (await plane.client.get("/readyz")).status == 200
    assert await chat(plane) == (200, "fam@int4", version)
    assert fleet.stats("sim-fam-int4").completed == 1
    assert plane.metric("gearbox_routing_table_version") == version


async def test_new_table_and_rollback_are_followed(make_plane: MakePlane, fleet: Fleet) -> None:
    plane = await make_plane()
    first = await plane.publisher.publish(fleet_table(fleet))
    await eventually(lambda: plane.version == first)
    second = await plane.publisher.publish(fleet_table(fleet, int4=False))
    await eventually(lambda: plane.version == second, what="new table picked up")
    assert await chat(plane) == (200, "fam@fp16", second)

    await plane.publisher.rollback(first)  # the pointer moves back
    await eventually(lambda: plane.version == first, what="rollback followed")
    assert await chat(plane) == (200, "fam@int4", first)


async def test_pointer_is_polled_when_pubsub_misses(
    make_plane: MakePlane, fleet: Fleet, redis_client: aioredis.Redis
) -> None:
    plane = await make_plane()
    first = await plane.publisher.publish(fleet_table(fleet))
    await eventually(lambda: plane.version == first)
    # Write a new version and move the pointer WITHOUT publishing an event.
    table = fleet_table(fleet, int4=False, version=first + 1)
    await redis_client.set(plane.keys.table_version(table.version), table.model_dump_json())
    await redis_client.set(plane.keys.table_current, table.version)
    await eventually(lambda: plane.version == table.version, what="poll found the new pointer")


async def test_malformed_tables_are_ignored(
    make_plane: MakePlane, fleet: Fleet, redis_client: aioredis.Redis
) -> None:
    plane = await make_plane()
    good = await plane.publisher.publish(fleet_table(fleet))
    await eventually(lambda: plane.version == good)
    keys = plane.keys
    # Not JSON at all.
    await redis_client.set(keys.table_version(50), b"{not json")
    await redis_client.set(keys.table_current, 50)
    await redis_client.publish(keys.table_events, "50")
    await eventually(
        lambda: (
            plane.metric("gearbox_routing_table_load_failures_total", reason="invalid_table") >= 1
        )
    )
    # Valid JSON whose content does not match its hash (tampered after stamping).
    tampered = json.loads(fleet_table(fleet, version=51).model_dump_json())
    tampered["entries"][0]["input_usd_per_mtok"] = 0.0
    await redis_client.set(keys.table_version(51), json.dumps(tampered))
    await redis_client.set(keys.table_current, 51)
    await redis_client.publish(keys.table_events, "51")
    await eventually(
        lambda: (
            plane.metric("gearbox_routing_table_load_failures_total", reason="invalid_table") >= 2
        )
    )
    # A pointer to a version that was never stored.
    await redis_client.set(keys.table_current, 52)
    await eventually(
        lambda: (
            plane.metric("gearbox_routing_table_load_failures_total", reason="missing_version") >= 1
        )
    )
    assert plane.version == good
    assert await chat(plane) == (200, "fam@int4", good)


async def test_redis_stopped_mid_run_changes_nothing_for_clients(
    make_plane: MakePlane, fleet: Fleet
) -> None:
    with running_redis() as private:
        publish_client = aioredis.Redis.from_url(private.url)
        try:
            plane = await make_plane(redis_url=private.url, publish_to=publish_client)
            first = await plane.publisher.publish(fleet_table(fleet))
            await eventually(lambda: plane.version == first)
            private.stop()
            await eventually(
                lambda: (
                    plane.metric(
                        "gearbox_routing_table_load_failures_total", reason="redis_unavailable"
                    )
                    >= 1
                ),
                what="outage noticed",
            )
            for _ in range(5):
                assert await chat(plane) == (200, "fam@int4", first)
            assert (await plane.client.get("/readyz")).status == 200

            # Redis comes back empty (no persistence): the same version number now holds
            # another table, and the watcher notices it by content hash.
            # RedisProcess.start() spawns a new process without closing the old one's stderr
            # pipe (tests/support); close it here so no ResourceWarning fails the test.
            if private.process.stderr is not None:
                private.process.stderr.close()
            private.start()
            await publish_client.aclose()
            publish_client = aioredis.Redis.from_url(private.url)
            publisher = Publishing(publish_client, plane.keys)
            again = await publisher.publish(fleet_table(fleet, int4=False))
            assert again == first
            await eventually(
                lambda: served_by(plane, "fam@fp16"), timeout_s=10, what="reloaded after restart"
            )
        finally:
            await publish_client.aclose()


async def served_by(plane: Plane, pair: str) -> bool:
    status, served, _ = await chat(plane)
    return status == 200 and served == pair


async def test_restart_from_snapshot_without_redis(
    make_plane: MakePlane, fleet: Fleet, tmp_path: Path
) -> None:
    plane = await make_plane()
    published = await plane.publisher.publish(fleet_table(fleet))
    await eventually(lambda: plane.version == published)
    snapshot = tmp_path / "snapshot" / "table.json"
    await eventually(snapshot.exists, what="snapshot written")

    dead_redis = f"redis://127.0.0.1:{free_port()}/0"
    restarted = await make_plane(redis_url=dead_redis)
    assert restarted.version == published  # loaded from the snapshot at startup
    assert (await restarted.client.get("/readyz")).status == 200
    assert await chat(restarted) == (200, "fam@int4", published)
    await eventually(
        lambda: (
            restarted.metric(
                "gearbox_routing_table_load_failures_total", reason="redis_unavailable"
            )
            >= 1
        )
    )


async def test_live_state_is_shared_in_redis(
    make_plane: MakePlane, fleet: Fleet, redis_client: aioredis.Redis
) -> None:
    plane = await make_plane()
    published = await plane.publisher.publish(fleet_table(fleet))
    await eventually(lambda: plane.version == published)
    assert (await chat(plane))[0] == 200
    key = plane.keys.data_plane_state("it-dp")

    async def state_shows_traffic() -> bool:
        raw = await redis_client.get(key)
        if raw is None:
            return False
        state = DataPlaneState.model_validate_json(raw)
        return state.table_version == published and state.requests_by_pair == {"fam@int4": 1}

    await eventually(state_shows_traffic, what="live state written")
    raw = await redis_client.get(key)
    assert isinstance(raw, bytes)
    state = DataPlaneState.model_validate_json(raw)
    assert {e.endpoint_id for e in state.endpoints} == {"fam@fp16#0", "fam@int4#0"}
    assert all(e.breaker == "closed" for e in state.endpoints)
    assert b"http" not in raw
    assert 0 < await redis_client.ttl(key) <= 30
