"""Gateway replicas share their requests in flight through a real redis-server, as the HTTP
data plane's replicas do (docs/gateway.md, "Load and shedding"; docs/data_plane.md,
"In-flight sharing"): two `GatewayProcess`es, the engine scrape off, so what one replica
knows of the other's requests comes from the exchange alone. On 8c8a749 gateway mode shared
nothing: the second replica routed onto a pair the first held at its line."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from contracts.redis_keys import RedisKeys
from data_plane.asked import Full
from data_plane.gateway.headers import HeaderList
from data_plane.gateway.router import GatewayRouter
from data_plane.gateway_app import GatewayProcess
from data_plane.serving.lifecycle import Finish, Request
from data_plane.settings import DataPlaneSettings
from data_plane.telemetry.metrics import Route
from tests.support.redis_server import RedisProcess, free_port
from tests.support.waiting import eventually
from tests.unit.data_plane.tables import entry, table

pytestmark = pytest.mark.integration

ENDPOINT = "llama@fp8#0"
# One pair, one endpoint: within a 5 s budget it sustains 4 requests, 3 of them standard
# (tests/component/data_plane/test_gateway_flow.py).
CHAT = {"model": "llama@fp8", "max_tokens": 10, "messages": [{"role": "user", "content": "hi"}]}
BODY = json.dumps(CHAT).encode()
HEADERS = HeaderList([("x-latency-budget-ms", "5000")])


def routed_on(router: GatewayRouter) -> Request:
    """A request routed on `router`, held until its door frees it (`Finish.free`)."""
    request = Request("", Route.CHAT_COMPLETIONS, 0.0)
    router.route(request, "chat", HEADERS, BODY)
    return request


@asynccontextmanager
async def replica(
    name: str, redis_server: RedisProcess, keys: RedisKeys, snapshot: Path
) -> AsyncIterator[GatewayProcess]:
    """One gateway replica running (its ext_proc and HTTP side on free ports) until the end."""
    flat: dict[str, Any] = {  # the settings' flat names, as flags and the environment
        "redis_url": redis_server.url,
        "redis_key_prefix": keys.prefix,
        "snapshot_path": snapshot,
        "scrape_interval_s": 0.0,
        "server_host": "127.0.0.1",
        "server_port": free_port(),
        "extproc_port": free_port(),
        "instance_id": name,
    }
    process = GatewayProcess(DataPlaneSettings(**flat))
    task = asyncio.create_task(process.run())
    try:
        await eventually(lambda: process.sharing is not None, what=f"{name} sharing")
        yield process
    finally:
        process.stop()
        await asyncio.wait_for(task, timeout=30)


async def test_a_gateway_replica_sees_the_other_replicas_requests_in_flight(
    redis_server: RedisProcess, redis_keys: RedisKeys, tmp_path: Path
) -> None:
    snapshot = tmp_path / "table.json"
    routing = table([entry("llama", "fp8", tpot_per_load_s=0.1)])
    snapshot.write_text(routing.model_dump_json(), encoding="utf-8")
    async with (
        replica("gw-a", redis_server, redis_keys, snapshot) as a,
        replica("gw-b", redis_server, redis_keys, snapshot) as b,
    ):
        held = [routed_on(a.router) for _ in range(3)]  # the line
        assert a.tracker.in_flight(ENDPOINT) == 3
        await eventually(
            lambda: b.tracker.peers_in_flight() == {ENDPOINT: 3.0}, what="b sees a's three"
        )
        with pytest.raises(Full):  # b's request waits, as a's next would
            routed_on(b.router)
        end = Finish(a.metrics, a.router.door.step, a.router.door.queue).free
        for request in held:  # their answers end
            end(request)
        await eventually(lambda: b.tracker.peers_in_flight() == {}, what="b sees them end")
        request = Request("", Route.CHAT_COMPLETIONS, 0.0)
        assert b.router.route(request, "chat", HEADERS, BODY).pair == "llama@fp8"
        Finish(b.metrics, b.router.door.step, b.router.door.queue).free(request)
        assert a.sharing is not None
        assert a.sharing.replicas_held == 2
