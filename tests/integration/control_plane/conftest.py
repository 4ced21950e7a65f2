"""Admin-API fixtures: a control plane app on the session's real redis-server."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from aiohttp import ClientResponse
from aiohttp.test_utils import TestClient
from aiohttp.web import Application
from pydantic import BaseModel, SecretStr

from contracts.redis_keys import RedisKeys
from control_plane.api.openapi import SCHEMA_MODELS, build_openapi
from control_plane.app import AppDeps, create_app
from control_plane.settings import ControlPlaneSettings
from tests.integration.control_plane.tables import NOW
from tests.support.redis_server import RedisProcess

TOKEN = "test-admin-token-0123456789abcdef"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
EXAMPLES = Path("examples/profiles")
MakeClient = Callable[..., Awaitable[TestClient[Any, Application]]]
_MODELS: dict[str, type[BaseModel]] = {m.__name__: m for m in SCHEMA_MODELS}


def settings_for(url: str, keys: RedisKeys, **kw: Any) -> ControlPlaneSettings:
    values: dict[str, Any] = {
        "redis_url": url,
        "redis_key_prefix": keys.prefix,
        "admin_token": SecretStr(TOKEN),
        "redis_timeout_s": 1.0,
        "publish_lock_wait_s": 2.0,
        **kw,
    }
    return ControlPlaneSettings(**values)


@pytest.fixture
def make_client(
    aiohttp_client: Any, redis_server: RedisProcess, redis_keys: RedisKeys
) -> MakeClient:
    """Start the app on loopback; keyword arguments override settings."""

    async def make(url: str | None = None, **kw: Any) -> TestClient[Any, Application]:
        settings = settings_for(url or redis_server.url, redis_keys, **kw)
        client: TestClient[Any, Application] = await aiohttp_client(
            create_app(settings, AppDeps(clock=lambda: NOW))
        )
        return client

    return make


def example_report(name: str = "llama-3.1-8b-instruct@fp16") -> dict[str, Any]:
    data: dict[str, Any] = json.loads((EXAMPLES / f"{name}.json").read_text())
    return data


async def documented(resp: ClientResponse, method: str, template: str) -> Any:
    """Assert the answer is one the OpenAPI document promises (status and body schema);
    returns the JSON body (None for empty or non-JSON bodies)."""
    doc = build_openapi(_all_routes(), protect_reads=False)
    operation = doc["paths"][template][method.lower()]
    assert str(resp.status) in operation["responses"], (
        f"{method} {template} answered undocumented {resp.status}: {await resp.text()}"
    )
    content = operation["responses"][str(resp.status)].get("content", {})
    if "application/json" not in content:
        return None
    assert resp.content_type == "application/json"
    body = await resp.json()
    schema = content["application/json"]["schema"]["$ref"].rsplit("/", 1)[1]
    if schema in _MODELS:
        _MODELS[schema].model_validate(body)
    return body


def _all_routes() -> tuple[Any, ...]:
    from control_plane.app import CORE_ROUTES

    return CORE_ROUTES
