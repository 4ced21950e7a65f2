"""Two real replicas given the same instance id (issue 22, item 6; docs/data_plane.md,
"Replica identity").

Two data planes from `create_app` with their production adapters, on one real redis-server,
both configured `GEARBOX_DP_INSTANCE_ID=dp-0` (what the compose file used to hard-code). On
8507f4b each dropped the other's breaker announcements and in-flight snapshots as its own echo,
silently: an engine one replica ejected kept getting the other's traffic. Now each says so
(`/readyz` warning, `gearbox_instance_id_clashes_total`, a WARNING log) and still hears the
other as the replica it is.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import redis.asyncio as aioredis
from aiohttp import web
from aiohttp.test_utils import TestServer

from contracts.redis_keys import RedisKeys
from control_plane.settings import PublisherOptions
from control_plane.store.publisher import Publisher
from data_plane.app import HEALTH, STORE, AppDeps, create_app
from demo.redis_launcher import free_port
from simulator import SimFleetConfig, run_fleet
from tests.reliability.stack import (
    CHEAP,
    PRICEY,
    dp_settings,
    fleet_table,
    metric,
    pair_of,
    served_name,
    sim_pair,
)
from tests.support.redis_server import RedisProcess
from tests.support.waiting import eventually

pytestmark = pytest.mark.integration

DEAD_EP = f"{pair_of(CHEAP)}#0"  # nothing listens there: the breaker of whoever calls it opens


async def _serve(app: web.Application, stack: AsyncExitStack) -> str:
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    stack.push_async_callback(server.close)
    return str(server.make_url("")).rstrip("/")


@pytest.fixture
async def replicas(
    tmp_path: Path,
    redis_server: RedisProcess,
    redis_client: aioredis.Redis,
    redis_keys: RedisKeys,
) -> AsyncIterator[list[tuple[str, web.Application]]]:
    """Replicas "a" and "b", both named dp-0, serving a table whose cheap pair is dead."""
    config = SimFleetConfig(pairs=[sim_pair(PRICEY)])
    async with run_fleet(config, answers={}) as fleet, AsyncExitStack() as stack:
        urls = {
            CHEAP: [f"http://127.0.0.1:{free_port()}"],
            PRICEY: [fleet.url(served_name(PRICEY))],
        }
        publisher = Publisher(redis_client, redis_keys, PublisherOptions())
        published = await publisher.publish(fleet_table(urls))
        planes = []
        for name in ("a", "b"):
            settings = dp_settings(
                redis_server.url,
                redis_keys.prefix,
                tmp_path / name / "table.json",
                instance_id="dp-0",
                in_flight_share_interval_ms=50,
                breaker_cooldown_s=30.0,
                breaker_cooldown_max_s=30.0,
            )
            app = create_app(settings, AppDeps())
            planes.append((await _serve(app, stack), app))
        await eventually(
            lambda: all(app[STORE].version == published.version for _, app in planes),
            what="tables loaded",
        )
        yield planes


async def _readyz(session: aiohttp.ClientSession, url: str) -> dict[str, Any]:
    async with session.get(f"{url}/readyz") as resp:
        assert resp.status == 200
        body: dict[str, Any] = await resp.json()
        return body


async def test_two_replicas_with_one_id_say_so(
    replicas: list[tuple[str, web.Application]],
) -> None:
    async with aiohttp.ClientSession() as session:
        for url, app in replicas:

            async def warned(url: str = url) -> bool:
                return bool((await _readyz(session, url))["warnings"])

            await eventually(warned, timeout_s=10, what="a /readyz warning")
            body = await _readyz(session, url)
            assert body["instance_id"] == "dp-0"
            assert body["warnings"][0].startswith("duplicate instance id 'dp-0': 1 other process")
            assert metric(app, "gearbox_instance_id_clashes_total") > 0


async def test_an_ejection_by_one_is_heard_by_the_other_despite_the_shared_id(
    replicas: list[tuple[str, web.Application]],
) -> None:
    """Replica a calls the dead engine until its breaker opens and announces it; b, which
    never called it, skips it too (on 8507f4b b took a's announcement for its own echo)."""
    (url_a, app_a), (_, app_b) = replicas
    body = {"model": "auto", "messages": [{"role": "user", "content": "Hi."}], "max_tokens": 4}
    async with aiohttp.ClientSession() as session:
        for _ in range(3):  # K = 3 in dp_settings
            async with session.post(f"{url_a}/v1/chat/completions", json=body) as resp:
                assert resp.status == 200  # served by the other pair
    assert metric(app_a, "gearbox_circuit_state", endpoint=DEAD_EP) == 2
    await eventually(
        lambda: DEAD_EP in app_b[HEALTH].view().open_endpoints,
        timeout_s=5,
        what="b ejects what a announced",
    )
    assert (
        metric(app_b, "gearbox_upstream_attempts_total", endpoint=DEAD_EP, outcome="connect_failed")
        == 0
    )
