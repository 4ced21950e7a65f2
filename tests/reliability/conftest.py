"""Fixtures of the fault tests: child processes that are always stopped, the control plane's
real publisher, and data planes / control planes served on loopback ports."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio as aioredis
from aiohttp import web
from aiohttp.test_utils import TestServer
from pydantic import SecretStr

from contracts.redis_keys import RedisKeys
from control_plane.app import AppDeps as CpDeps
from control_plane.app import create_app as create_cp_app
from control_plane.settings import ControlPlaneSettings, PublisherOptions
from control_plane.store.publisher import Publisher
from data_plane.app import STORE, AppDeps, create_app
from data_plane.settings import DataPlaneSettings
from tests.reliability.processes import Child

ADMIN_TOKEN = "reliability-admin-token-0123456789"
ADMIN = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
ServerFactory = Callable[..., Awaitable[TestServer]]


@pytest.fixture
async def children() -> AsyncIterator[list[Child]]:
    """Append every child you start; each is killed at teardown, whatever the test did."""
    started: list[Child] = []
    yield started
    for child in started:
        await child.kill()


@pytest.fixture
def publisher(redis_client: aioredis.Redis, redis_keys: RedisKeys) -> Publisher:
    """The control plane's own publisher on the session Redis (short lock for crash tests)."""
    return Publisher(redis_client, redis_keys, PublisherOptions(lock_ttl_s=1.0, lock_wait_s=5.0))


@dataclass
class LiveDataPlane:
    server: TestServer
    app: web.Application

    @property
    def url(self) -> str:
        return str(self.server.make_url("")).rstrip("/")

    @property
    def version(self) -> int | None:
        return self.app[STORE].version


StartDataPlane = Callable[[DataPlaneSettings], Awaitable[LiveDataPlane]]


@pytest.fixture
def start_data_plane(aiohttp_server: ServerFactory) -> StartDataPlane:
    """A data plane from `create_app` with its production adapters, on a loopback port."""

    async def start(settings: DataPlaneSettings) -> LiveDataPlane:
        app = create_app(settings, AppDeps())
        server = await aiohttp_server(app, host="127.0.0.1")
        return LiveDataPlane(server, app)

    return start


def cp_settings(redis_url: str, prefix: str, **kw: Any) -> ControlPlaneSettings:
    values: dict[str, Any] = {
        "redis_url": redis_url,
        "redis_key_prefix": prefix,
        "admin_token": SecretStr(ADMIN_TOKEN),
        "redis_timeout_s": 0.5,
        "redis_retries": 0,
        "publish_lock_ttl_s": 2.0,
        "publish_lock_wait_s": 5.0,
        **kw,
    }
    return ControlPlaneSettings(**values)


StartControlPlane = Callable[..., Awaitable[str]]


@pytest.fixture
def start_control_plane(aiohttp_server: ServerFactory) -> StartControlPlane:
    """The admin API on a loopback port; returns its base URL."""

    async def start(redis_url: str, prefix: str, **kw: Any) -> str:
        app = create_cp_app(cp_settings(redis_url, prefix, **kw), CpDeps())
        server = await aiohttp_server(app, host="127.0.0.1")
        return str(server.make_url("")).rstrip("/")

    return start


@pytest.fixture
def snapshot(tmp_path: Path) -> Path:
    return tmp_path / "snapshot" / "table.json"
