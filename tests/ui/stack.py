"""A whole Gearbox on loopback for page and metrics tests: the control plane and a data plane
from their real `create_app`s on one redis-server, with the example fleet published through the
admin API (profiles pushed, table built and published by the control plane's publisher)."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import aiohttp
import redis.asyncio as aioredis
from aiohttp import web
from aiohttp.test_utils import TestServer
from pydantic import SecretStr

from contracts.live_state import (
    BreakerState,
    ClassCounters,
    DataPlaneState,
    EndpointState,
    PairCounters,
)
from contracts.redis_keys import RedisKeys
from control_plane.app import AppDeps as CpDeps
from control_plane.app import create_app as create_cp_app
from control_plane.settings import ControlPlaneSettings
from data_plane.app import STORE
from data_plane.app import AppDeps as DpDeps
from data_plane.app import create_app as create_dp_app
from data_plane.settings import DataPlaneSettings
from tests.support.waiting import eventually

REPO = Path(__file__).resolve().parents[2]
EXAMPLE_PROFILES = REPO / "examples" / "profiles"
EXAMPLE_POLICY = REPO / "examples" / "policy.yaml"
ADMIN_TOKEN = "operator-page-admin-token-0123456789"
ADMIN = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
ServerFactory = Callable[..., Awaitable[TestServer]]
# Far above any answer's time here, far below pytest's timeout: a hang fails with its request.
CLIENT_TIMEOUT = aiohttp.ClientTimeout(total=60, sock_connect=10)


def client(headers: Mapping[str, str] | None = None) -> aiohttp.ClientSession:
    """An HTTP client for tests, with bounded timeouts."""
    return aiohttp.ClientSession(headers=headers, timeout=CLIENT_TIMEOUT)


def example_reports() -> dict[str, dict[str, Any]]:
    """pair -> the example ProfileReport as JSON data (endpoints point at cluster DNS names)."""
    reports = {}
    for path in sorted(EXAMPLE_PROFILES.glob("*.json")):
        data: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
        reports[f"{data['family']}@{data['quantization']}"] = data
    return reports


def base_url(server: TestServer) -> str:
    return str(server.make_url("")).rstrip("/")


@dataclass
class Stack:
    redis: aioredis.Redis
    keys: RedisKeys
    cp: TestServer
    dp: TestServer
    dp_app: web.Application
    version: int

    @property
    def cp_url(self) -> str:
        return base_url(self.cp)

    @property
    def dp_url(self) -> str:
        return base_url(self.dp)


def dp_settings(redis_url: str, keys: RedisKeys, instance: str, **kw: Any) -> DataPlaneSettings:
    values: dict[str, Any] = {
        "redis_url": redis_url,
        "redis_key_prefix": keys.prefix,
        "instance_id": instance,
        "table_poll_interval_s": 0.2,
        "redis_timeout_s": 1.0,
        "redis_backoff_max_s": 0.3,
        "live_state_interval_s": 0.2,
        "feedback_canary_items_per_minute": 0.0,  # on by default; tests that mean them say so
        **kw,
    }
    return DataPlaneSettings(**values)


def cp_settings(redis_url: str, keys: RedisKeys, **kw: Any) -> ControlPlaneSettings:
    values: dict[str, Any] = {
        "redis_url": redis_url,
        "redis_key_prefix": keys.prefix,
        "admin_token": SecretStr(ADMIN_TOKEN),
        "redis_timeout_s": 1.0,
        "policy_file": EXAMPLE_POLICY,
        **kw,
    }
    return ControlPlaneSettings(**values)


async def push_and_publish(cp_url: str, reports: Mapping[str, Mapping[str, Any]]) -> int:
    """Push every report through the admin API, then build and publish; the new version."""
    async with client(ADMIN) as session:
        for report in reports.values():
            async with session.post(f"{cp_url}/v1/profiles", json=report) as resp:
                assert resp.status in (200, 201), await resp.text()
        async with session.post(f"{cp_url}/v1/tables") as resp:
            assert resp.status == 201, await resp.text()
            body = await resp.json()
    version: int = body["version"]
    return version


async def start_stack(
    aiohttp_server: ServerFactory,
    redis_url: str,
    redis: aioredis.Redis,
    keys: RedisKeys,
    reports: Mapping[str, Mapping[str, Any]],
    dp: Mapping[str, Any] | None = None,
    cp: Mapping[str, Any] | None = None,
) -> Stack:
    """Data plane first (the control plane's explainer needs its URL), then the control plane,
    then publish; returns once the data plane serves the published version."""
    dp_app = create_dp_app(dp_settings(redis_url, keys, "ui-dp", **(dp or {})), DpDeps())
    dp_server = await aiohttp_server(dp_app, host="127.0.0.1")
    settings = cp_settings(redis_url, keys, data_plane_url=base_url(dp_server), **(cp or {}))
    cp_server = await aiohttp_server(create_cp_app(settings, CpDeps()), host="127.0.0.1")
    version = await push_and_publish(base_url(cp_server), reports)
    await eventually(
        lambda: dp_app[STORE].version == version, timeout_s=30, what="data plane loads the table"
    )
    return Stack(redis, keys, cp_server, dp_server, dp_app, version)


async def write_state(
    redis: aioredis.Redis,
    keys: RedisKeys,
    instance: str,
    endpoints: Mapping[str, tuple[str, BreakerState, int]],
    requests_by_pair: Mapping[str, int],
    table_version: int | None,
    fallbacks: int = 0,
    pairs: Mapping[str, PairCounters] | None = None,
    classes: tuple[Mapping[str, ClassCounters], Mapping[str, ClassCounters]] = ({}, {}),
) -> DataPlaneState:
    """Write one instance's live state as a data plane would (`endpoint id -> (pair, breaker,
    in flight)`) and its (tenant, priority class) counters, with a TTL."""
    state = DataPlaneState(
        instance=instance,
        table_version=table_version,
        updated_at=datetime.now(UTC),
        endpoints=tuple(
            EndpointState(endpoint_id=eid, pair=pair, breaker=breaker, in_flight=n)
            for eid, (pair, breaker, n) in endpoints.items()
        ),
        requests_by_pair=dict(requests_by_pair),
        fallbacks_total=fallbacks,
        pairs=dict(pairs or {}),
        tenants=dict(classes[0]),
        priorities=dict(classes[1]),
    )
    await redis.set(keys.data_plane_state(instance), state.model_dump_json(), ex=60)
    return state
