"""Many replicas behave as one router when an engine dies (docs/data_plane.md, "Breaker
announcements"): three data planes behind a real nginx, on a real redis-server, in front of
simulator engines, under load; the cheap engine starts failing every request."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Sequence
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp
import pytest
import redis.asyncio as aioredis
from aiohttp import web

from contracts.redis_keys import RedisKeys
from data_plane.app import ANNOUNCEMENTS, HEALTH, STORE, create_app
from data_plane.resilience.breaker import BreakerState
from simulator import FaultConfig, Fleet
from tests.integration.data_plane.conftest import INT4, Publishing, fleet_table, plane_settings
from tests.support.load_balancer import running_nginx
from tests.support.redis_server import RedisProcess, free_port, running_redis
from tests.support.waiting import eventually

pytestmark = pytest.mark.integration

DEAD = "fam@int4#0"  # the cheap pair's only endpoint: every request's first choice
K = 5  # consecutive failures that open a breaker
BODY = json.dumps({"model": "auto", "messages": [{"role": "user", "content": "hi"}]})


@dataclass
class Replica:
    app: web.Application
    port: int
    ejected_at: float | None = None

    @property
    def ejected(self) -> bool:
        return DEAD in self.app[HEALTH].view().open_endpoints

    @property
    def own_breaker(self) -> BreakerState:
        return self.app[HEALTH].state(DEAD)


@dataclass
class Load:
    """Requests through the load balancer from `workers` clients until stopped."""

    url: str
    statuses: list[int] = field(default_factory=list)
    _stop: asyncio.Event = field(default_factory=asyncio.Event)

    async def _worker(self, session: aiohttp.ClientSession) -> None:
        while not self._stop.is_set():
            async with session.post(self.url, data=BODY) as resp:
                await resp.read()
                self.statuses.append(resp.status)

    async def run(self, workers: int) -> None:
        async with aiohttp.ClientSession() as session:
            await asyncio.gather(*(self._worker(session) for _ in range(workers)))

    def stop(self) -> None:
        self._stop.set()


async def _replicas(
    stack: AsyncExitStack, redis_url: str, keys: RedisKeys, tmp_path: Path, n: int
) -> list[Replica]:
    out = []
    for i in range(n):
        settings = plane_settings(
            redis_url,
            keys,
            tmp_path / f"dp-{i}" / "table.json",
            instance_id=f"dp-{i}",
            breaker_consecutive_failures=K,
            breaker_cooldown_s=10.0,
            redis_timeout_s=0.5,
        )
        app = create_app(settings)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        stack.push_async_callback(runner.cleanup)
        port = free_port()
        await web.TCPSite(runner, "127.0.0.1", port).start()
        out.append(Replica(app, port))
    return out


async def _watch(replicas: Sequence[Replica], start: float) -> None:
    """Record when each replica first skips the dead endpoint."""
    while any(r.ejected_at is None for r in replicas):
        for r in replicas:
            if r.ejected_at is None and r.ejected:
                r.ejected_at = time.monotonic() - start
        await asyncio.sleep(0.002)


async def _serve_until_all_ejected(
    fleet: Fleet, replicas: Sequence[Replica], lb_port: int
) -> tuple[Load, float]:
    load = Load(f"http://127.0.0.1:{lb_port}/v1/chat/completions")
    running = asyncio.create_task(load.run(workers=4))
    try:
        await eventually(lambda: len(load.statuses) >= 20, timeout_s=20, what="warm-up load")
        fleet.set_faults(INT4, FaultConfig(error_rate=1.0, error_status=503))
        killed = time.monotonic()
        await asyncio.wait_for(_watch(replicas, killed), timeout=30)
        done = time.monotonic() - killed
    finally:
        load.stop()
        await running
    return load, done


@pytest.fixture
async def stack() -> AsyncIterator[AsyncExitStack]:
    async with AsyncExitStack() as s:
        yield s


async def test_an_engine_one_replica_ejects_is_ejected_by_all(
    fleet: Fleet,
    redis_server: RedisProcess,
    redis_keys: RedisKeys,
    redis_client: aioredis.Redis,
    tmp_path: Path,
    stack: AsyncExitStack,
) -> None:
    await Publishing(redis_client, redis_keys).publish(fleet_table(fleet))
    replicas = await _replicas(stack, redis_server.url, redis_keys, tmp_path, 3)
    await eventually(lambda: all(r.app[STORE].version is not None for r in replicas), timeout_s=10)
    # Most traffic reaches dp-0, so its breaker opens first; dp-1 and dp-2 see few failures.
    weights = [(replicas[0].port, 8), (replicas[1].port, 1), (replicas[2].port, 1)]
    with running_nginx(tmp_path / "nginx", weights) as lb_port:
        load, _ = await _serve_until_all_ejected(fleet, replicas, lb_port)

    assert set(load.statuses) == {200}, "failed attempts fell back to the precise pair"
    times = [r.ejected_at for r in replicas if r.ejected_at is not None]
    assert len(times) == 3
    print(f"\nejection after the engine died (s): {[round(t, 3) for t in times]}")
    assert replicas[0].own_breaker is BreakerState.OPEN
    assert max(times) - min(times) < 1.0, times
    for r in replicas[1:]:
        # Ejected on dp-0's announcement, before its own breaker saw K failures.
        assert r.own_breaker is BreakerState.CLOSED
        assert r.app[ANNOUNCEMENTS].heard >= 1


async def test_with_redis_down_each_replica_still_ejects_on_its_own(
    fleet: Fleet, redis_keys: RedisKeys, tmp_path: Path, stack: AsyncExitStack
) -> None:
    with running_redis() as server:
        publisher_client = aioredis.Redis.from_url(server.url)
        await Publishing(publisher_client, redis_keys).publish(fleet_table(fleet))
        await publisher_client.aclose()
        replicas = await _replicas(stack, server.url, redis_keys, tmp_path, 3)
        await eventually(
            lambda: all(r.app[STORE].version is not None for r in replicas), timeout_s=10
        )
        server.stop()
        weights = [(r.port, 1) for r in replicas]
        with running_nginx(tmp_path / "nginx", weights) as lb_port:
            load, done = await _serve_until_all_ejected(fleet, replicas, lb_port)
    assert set(load.statuses) == {200}
    assert all(r.own_breaker is BreakerState.OPEN for r in replicas)
    assert all(r.app[ANNOUNCEMENTS].heard == 0 for r in replicas)
    print(f"\nRedis down: every replica ejected on its own within {done:.3f} s")
