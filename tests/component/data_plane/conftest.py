"""The component harness: a real app from `create_app` with a FakeUpstream, no Redis."""

from __future__ import annotations

import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient
from pytest_aiohttp import AiohttpClient

from contracts.routing_table import RoutingTable
from data_plane.app import METRICS, STORE, AppDeps, create_app
from data_plane.decision.compile import compile_table
from data_plane.settings import DataPlaneSettings
from tests.component.data_plane.fakes import FakeUpstream, Responder, by_url


class FakeClock:
    """Monotonic seconds that move only when a test says so."""

    def __init__(self, start: float = 1000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@dataclass
class Harness:
    client: TestClient[web.Request, web.Application]
    app: web.Application
    upstream: FakeUpstream
    clock: FakeClock

    def swap(self, table: RoutingTable) -> None:
        self.app[STORE].swap(compile_table(table), table.created_at.timestamp())

    def metric(self, name: str, **labels: str) -> float:
        value = self.app[METRICS].registry.get_sample_value(name, labels)
        return 0.0 if value is None else value


MakeHarness = Callable[..., Awaitable[Harness]]


def settings(**overrides: Any) -> DataPlaneSettings:
    # No engines behind the fake upstream: nothing to scrape.
    base: dict[str, Any] = {
        "redis_url": "",
        "deadline_grace_s": 0.2,
        "breaker_cooldown_s": 5.0,
        "scrape_interval_s": 0.0,
    }
    return DataPlaneSettings(**{**base, **overrides})


@pytest.fixture
def make_harness(aiohttp_client: AiohttpClient) -> MakeHarness:
    async def make(
        table: RoutingTable | None,
        responder: Responder | None = None,
        routes: dict[str, Any] | None = None,
        **overrides: Any,
    ) -> Harness:
        upstream = FakeUpstream(responder or by_url(routes or {}))
        clock = FakeClock()
        deps = AppDeps(
            clock=clock, rng=random.Random(7), upstream=upstream, **overrides.pop("deps", {})
        )
        app = create_app(settings(**overrides), deps)
        client = await aiohttp_client(app)
        harness = Harness(client, app, upstream, clock)
        if table is not None:
            harness.swap(table)
        return harness

    return make


CHAT_BODY = {
    "model": "auto",
    "messages": [{"role": "user", "content": "Say hello."}],
    "max_tokens": 8,
}
