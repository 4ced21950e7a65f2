"""Integration harness: a real redis-server, simulator engines on loopback, the real publisher,
and the data plane built by `create_app` with its production adapters."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio as aioredis
from aiohttp import web
from aiohttp.test_utils import TestClient
from pytest_aiohttp import AiohttpClient

from contracts.redis_keys import RedisKeys
from contracts.routing_table import RoutingTable
from control_plane.settings import PublisherOptions
from control_plane.store.publisher import Publisher, PublishOutcome
from data_plane.app import METRICS, STORE, AppDeps, create_app
from data_plane.settings import DataPlaneSettings
from simulator import Fleet, SimFleetConfig, SimPairConfig, run_fleet
from tests.component.data_plane.fakes import make_table, pair_entry
from tests.support.redis_server import RedisProcess

FP16, INT4 = "sim-fam-fp16", "sim-fam-int4"


@pytest.fixture
async def fleet() -> AsyncIterator[Fleet]:
    pairs = [
        SimPairConfig(
            name=FP16, family="fam", quantization="fp16", ttft_base_s=0.005, tpot_base_s=0.002
        ),
        SimPairConfig(
            name=INT4, family="fam", quantization="int4", ttft_base_s=0.005, tpot_base_s=0.001
        ),
    ]
    async with run_fleet(SimFleetConfig(pairs=pairs), answers={}) as running:
        yield running


def fleet_table(fleet: Fleet, *, int4: bool = True, **kw: Any) -> RoutingTable:
    """fam@fp16 (accurate, pricey) and, unless left out, fam@int4 (cheap) on the simulators."""
    entries = [
        pair_entry(
            "fam",
            "fp16",
            urls=[fleet.url(FP16)],
            accuracy=0.9,
            usd_per_mtok=4.0,
            served_model_name=FP16,
        )
    ]
    if int4:
        entries.append(
            pair_entry(
                "fam",
                "int4",
                urls=[fleet.url(INT4)],
                accuracy=0.6,
                precision_rank=1,
                served_model_name=INT4,
            )
        )
    return make_table(entries, **kw)


class Publishing:
    """The control plane's real Publisher, with the two calls these tests make."""

    def __init__(self, redis: aioredis.Redis, keys: RedisKeys) -> None:
        self.publisher = Publisher(redis, keys, PublisherOptions())

    async def publish(self, table: RoutingTable) -> int:
        result = await self.publisher.publish(table)
        assert result.outcome is PublishOutcome.PUBLISHED
        return result.version

    async def rollback(self, version: int) -> None:
        await self.publisher.rollback(version)


@dataclass
class Plane:
    client: TestClient[web.Request, web.Application]
    app: web.Application
    publisher: Publishing
    keys: RedisKeys

    @property
    def version(self) -> int | None:
        return self.app[STORE].version

    def metric(self, name: str, **labels: str) -> float:
        value = self.app[METRICS].registry.get_sample_value(name, labels)
        return 0.0 if value is None else value


MakePlane = Callable[..., Awaitable[Plane]]


def plane_settings(redis_url: str, keys: RedisKeys, snapshot: Path, **kw: Any) -> DataPlaneSettings:
    base: dict[str, Any] = {
        "redis_url": redis_url,
        "redis_key_prefix": keys.prefix,
        "snapshot_path": snapshot,
        "table_poll_interval_s": 0.2,
        "redis_timeout_s": 1.0,
        "redis_backoff_max_s": 0.3,
        "live_state_interval_s": 0.2,
        "breaker_cooldown_s": 0.5,
        "deadline_grace_s": 0.5,
        "instance_id": "it-dp",
        "feedback_canary_items_per_minute": 0.0,  # on by default; tests that mean them say so
    }
    return DataPlaneSettings(**{**base, **kw})


@pytest.fixture
def make_plane(
    aiohttp_client: AiohttpClient,
    redis_server: RedisProcess,
    redis_keys: RedisKeys,
    redis_client: aioredis.Redis,
    tmp_path: Path,
) -> MakePlane:
    async def make(
        redis_url: str | None = None, publish_to: aioredis.Redis | None = None, **kw: Any
    ) -> Plane:
        settings = plane_settings(
            redis_url or redis_server.url, redis_keys, tmp_path / "snapshot" / "table.json", **kw
        )
        app = create_app(settings, AppDeps())
        client = await aiohttp_client(app)
        publisher = Publishing(publish_to or redis_client, redis_keys)
        return Plane(client, app, publisher, redis_keys)

    return make
