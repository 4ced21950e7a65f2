"""Endpoints are pods (docs/data_plane.md, "Endpoint discovery"), against a real DNS server:
dnsmasq on loopback answers the SRV records of a headless Service whose pods are loopback
HTTP servers; the records change during the test (a pod leaves, another joins). Gateway mode
discovers and scrapes pods the same way."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient
from pytest_aiohttp import AiohttpClient

from data_plane.app import HEALTH, METRICS, STORE, create_app
from data_plane.gateway_app import GatewayProcess
from data_plane.resilience.breaker import BreakerState
from data_plane.settings import (
    DataPlaneSettings,
    DiscoverySettings,
    RedisSettings,
    ScrapeSettings,
    TableSettings,
)
from tests.component.data_plane.fakes import chat_json, make_table, pair_entry
from tests.support.dns_server import Dnsmasq, running_dnsmasq
from tests.support.redis_server import free_port
from tests.support.waiting import eventually

pytestmark = pytest.mark.integration

SERVICE = "_http._tcp.pods.test"  # the SRV name Kubernetes gives a headless Service's port
ENDPOINT = "fam@int4#0"
BODY = json.dumps({"model": "auto", "messages": [{"role": "user", "content": "hi"}]})


class Pod:
    """One engine replica on 127.0.0.1: counts chat requests, reports a queue on /metrics."""

    def __init__(self, name: str, queue: int) -> None:
        self.name, self.queue, self.hits = name, queue, 0
        self.port = 0
        self._runner: web.AppRunner | None = None

    async def _chat(self, request: web.Request) -> web.Response:
        self.hits += 1
        return web.Response(body=chat_json(self.name), content_type="application/json")

    async def _metrics(self, request: web.Request) -> web.Response:
        return web.Response(text=f"vllm:num_requests_waiting {self.queue}\n")

    async def start(self) -> None:
        app = web.Application()
        app.add_routes(
            [web.post("/v1/chat/completions", self._chat), web.get("/metrics", self._metrics)]
        )
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    @property
    def endpoint_id(self) -> str:
        return f"{ENDPOINT}/127.0.0.1:{self.port}"


@pytest.fixture
async def pods() -> AsyncIterator[dict[str, Pod]]:
    running = {name: Pod(name, queue) for name, queue in (("a", 1), ("b", 2), ("c", 3))}
    for pod in running.values():
        await pod.start()
    yield running
    for pod in running.values():
        await pod.stop()


@pytest.fixture
def dns(tmp_path: Path) -> Iterator[Dnsmasq]:
    with running_dnsmasq(tmp_path) as server:
        yield server


def _records(*pods: Pod) -> dict[str, Any]:
    return {
        "srv": [(SERVICE, f"pod-{p.name}.test", p.port) for p in pods],
        "a": [(f"pod-{p.name}.test", "127.0.0.1") for p in pods],
    }


def _served_ids(app: web.Application) -> set[str]:
    table = app[STORE].current
    return set() if table is None else {e.id for p in table.pairs for e in p.endpoints}


async def _client(
    aiohttp_client: AiohttpClient, tmp_path: Path, dns: Dnsmasq
) -> TestClient[web.Request, web.Application]:
    table = make_table([pair_entry("fam", "int4", urls=[f"http://{SERVICE}:8000"])])
    snapshot = tmp_path / "table.json"
    snapshot.write_text(table.model_dump_json(), encoding="utf-8")
    settings = DataPlaneSettings(
        redis=RedisSettings(url=""),
        table=TableSettings(snapshot_path=snapshot),
        discovery=DiscoverySettings(interval_s=0.1, dns_servers=dns.server, dns_timeout_s=0.5),
        scrape=ScrapeSettings(interval_s=0.1),
    )
    return await aiohttp_client(create_app(settings))


async def test_pods_are_discovered_dropped_and_joined(
    aiohttp_client: AiohttpClient, tmp_path: Path, pods: dict[str, Pod], dns: Dnsmasq
) -> None:
    a, b, c = pods["a"], pods["b"], pods["c"]
    dns.serve(**_records(a, b))
    client = await _client(aiohttp_client, tmp_path, dns)
    app = client.app
    await eventually(
        lambda: _served_ids(app) == {a.endpoint_id, b.endpoint_id}, what="two pods served"
    )

    # One endpoint per pod: requests spread over both, each pod scraped on its own.
    for _ in range(12):
        resp = await client.post("/v1/chat/completions", data=BODY)
        assert resp.status == 200
    assert a.hits > 0
    assert b.hits > 0
    assert a.hits + b.hits == 12
    metrics = app[METRICS].registry

    def depth(pod: Pod) -> float | None:
        return metrics.get_sample_value("gearbox_engine_queue_depth", {"endpoint": pod.endpoint_id})

    await eventually(lambda: depth(a) == 1.0 and depth(b) == 2.0, what="per-pod queue depth")

    # The records change: b leaves, c joins. b is dropped; c joins half-open.
    dns.serve(**_records(a, c))
    await eventually(
        lambda: _served_ids(app) == {a.endpoint_id, c.endpoint_id}, what="b dropped, c joined"
    )
    health = app[HEALTH]
    assert health.state(c.endpoint_id) is BreakerState.HALF_OPEN
    assert health.state(a.endpoint_id) is BreakerState.CLOSED
    state = metrics.get_sample_value("gearbox_circuit_state", {"endpoint": c.endpoint_id})
    assert state == 1.0
    b_hits = b.hits
    for _ in range(12):
        resp = await client.post("/v1/chat/completions", data=BODY)
        assert resp.status == 200
    assert b.hits == b_hits, "a pod that left gets no traffic"
    assert c.hits > 0
    assert health.state(c.endpoint_id) is BreakerState.CLOSED  # its probe succeeded


async def test_a_dns_outage_keeps_the_known_pods_and_no_records_fall_back(
    aiohttp_client: AiohttpClient,
    tmp_path: Path,
    pods: dict[str, Pod],
    dns: Dnsmasq,
    caplog: pytest.LogCaptureFixture,
) -> None:
    a = pods["a"]
    dns.serve(**_records(a))
    client = await _client(aiohttp_client, tmp_path, dns)
    app = client.app
    await eventually(lambda: _served_ids(app) == {a.endpoint_id}, what="one pod served")
    dns.stop()  # lookups fail (no server): the last known pods stay

    def lookup_failed() -> bool:
        return any("keeping the last known pods" in r.getMessage() for r in caplog.records)

    await eventually(lookup_failed, what="a failed lookup")
    assert _served_ids(app) == {a.endpoint_id}
    resp = await client.post("/v1/chat/completions", data=BODY)
    assert resp.status == 200
    assert a.hits == 1

    dns.serve(a=[("other.test", "127.0.0.1")])  # the Service's name has no records now
    await eventually(lambda: _served_ids(app) == {ENDPOINT}, what="fallback to the table URL")


def _two_port_table(
    tmp_path: Path, dns: Dnsmasq, ports: tuple[int, int], max_per_name: int = 256
) -> DataPlaneSettings:
    """Two pairs on one name, told apart by the port (one Service, two engines per pod)."""
    a, b = ports
    table = make_table(
        [
            pair_entry("fam", "int4", urls=[f"http://pods.test:{a}"], usd_per_mtok=1.0),
            pair_entry("fam", "int8", urls=[f"http://pods.test:{b}"], usd_per_mtok=2.0),
        ]
    )
    snapshot = tmp_path / "table.json"
    snapshot.write_text(table.model_dump_json(), encoding="utf-8")
    discovery = DiscoverySettings(
        interval_s=0.1,
        dns_servers=dns.server,
        dns_timeout_s=0.5,
        max_addresses_per_name=max_per_name,
    )
    return DataPlaneSettings(
        redis=RedisSettings(url=""),
        table=TableSettings(snapshot_path=snapshot),
        discovery=discovery,
    )


async def test_one_name_on_two_ports_is_two_sets_of_pods(
    aiohttp_client: AiohttpClient, tmp_path: Path, pods: dict[str, Pod], dns: Dnsmasq
) -> None:
    a, b = pods["a"], pods["b"]
    dns.serve(a=[("pods.test", "127.0.0.1")])
    settings = _two_port_table(tmp_path, dns, (a.port, b.port))
    client = await aiohttp_client(create_app(settings))
    int4, int8 = f"fam@int4#0/127.0.0.1:{a.port}", f"fam@int8#0/127.0.0.1:{b.port}"
    await eventually(lambda: _served_ids(client.app) == {int4, int8}, what="one pod per port")
    for pinned, pod in (("fam@int4", a), ("fam@int8", b)):
        body = json.dumps({"model": pinned, "messages": [{"role": "user", "content": "hi"}]})
        resp = await client.post("/v1/chat/completions", data=body)
        assert resp.status == 200
        assert pod.hits == 1, f"{pinned} reached the engine on its own port"


async def test_addresses_per_name_are_capped(
    aiohttp_client: AiohttpClient,
    tmp_path: Path,
    dns: Dnsmasq,
    caplog: pytest.LogCaptureFixture,
) -> None:
    addresses = [f"127.0.0.{i}" for i in range(1, 6)]
    dns.serve(a=[("pods.test", address) for address in addresses])
    settings = _two_port_table(tmp_path, dns, (8001, 8002), max_per_name=2)
    client = await aiohttp_client(create_app(settings))
    expected = {
        f"fam@{q}#0/{ip}:{port}"
        for q, port in (("int4", 8001), ("int8", 8002))
        for ip in addresses[:2]
    }
    await eventually(lambda: _served_ids(client.app) == expected, what="two pods per name")
    warned = [r for r in caplog.records if "has 5 addresses; serving the first 2" in r.getMessage()]
    assert len(warned) == 2  # once per (name, port), not once per refresh


async def test_gateway_mode_scrapes_each_pod(
    tmp_path: Path, pods: dict[str, Pod], dns: Dnsmasq
) -> None:
    """Gateway mode (docs/gateway.md, "Load and shedding") discovers pods as the data plane
    does, so its only load signal, the scrape, is per pod too."""
    a, b = pods["a"], pods["b"]
    dns.serve(**_records(a, b))
    table = make_table([pair_entry("fam", "int4", urls=[f"http://{SERVICE}:8000"])])
    snapshot = tmp_path / "table.json"
    snapshot.write_text(table.model_dump_json(), encoding="utf-8")
    flat: dict[str, Any] = {  # the flat setting names, as flags and the environment spell them
        "host": "127.0.0.1",
        "port": free_port(),
        "extproc_port": free_port(),
        "redis_url": "",
        "snapshot_path": snapshot,
        "endpoint_discovery_interval_s": 0.1,
        "endpoint_dns_servers": dns.server,
        "endpoint_dns_timeout_s": 0.5,
        "scrape_interval_s": 0.1,
    }
    settings = DataPlaneSettings(**flat)
    process = GatewayProcess(settings)
    running = asyncio.create_task(process.run())
    try:
        served = {a.endpoint_id, b.endpoint_id}

        def ids() -> set[str]:
            current = process.store.current
            return set() if current is None else {e.id for p in current.pairs for e in p.endpoints}

        await eventually(lambda: ids() == served, what="two pods served")
        load = process.tracker.load
        await eventually(
            lambda: load.get(a.endpoint_id) == 1.0 and load.get(b.endpoint_id) == 2.0,
            what="per-pod load from the scrape",
        )
    finally:
        process.stop()
        await asyncio.wait_for(running, timeout=30)
