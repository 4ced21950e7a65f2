"""The higher bands' reserve across replicas (docs/data_plane.md, "Flow control"; issue 32):
a replica's line keeps room for the critical requests the *other* replicas decided at the
pair lately, as they share them through the in-flight sums on a real redis-server, also
behind a real nginx that splits the requests. Two real apps, each with a fake engine whose
answers the test holds, and one clock the test moves for both (the window is read from
whole 100 ms buckets of it); the exchange itself runs on the event loop every 25 ms, and
every wait is on what a replica has seen."""

from __future__ import annotations

import asyncio
import json
import random
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import redis.asyncio as aioredis
from aiohttp import web
from aiohttp.test_utils import TestClient
from pytest_aiohttp import AiohttpClient

from contracts.redis_keys import RedisKeys
from contracts.routing_table import RoutingTable
from data_plane.app import ARRIVALS, HEALTH, METRICS, STORE, AppDeps, create_app
from data_plane.resilience.band_arrivals import BUCKET_S, WINDOW_S
from data_plane.upstream.port import UpstreamRequest
from tests.component.data_plane.conftest import CHAT_BODY, FakeClock
from tests.component.data_plane.fakes import (
    FakeResponse,
    FakeUpstream,
    by_url,
    chat_json,
    make_table,
    pair_entry,
)
from tests.integration.data_plane.conftest import Publishing, plane_settings
from tests.support.load_balancer import running_nginx
from tests.support.redis_server import RedisProcess
from tests.support.waiting import eventually

pytestmark = pytest.mark.integration

URL = "http://fp16-a"
BODY = json.dumps(CHAT_BODY).encode()
BUDGET = {"X-Latency-Budget-Ms": "10000"}
CRITICAL = {**BUDGET, "X-Priority": "critical"}
STANDARD = {"priority": "standard"}
CRITICAL_SHARE, STANDARD_SHARE = 1.0, 0.75


def eight_slots() -> RoutingTable:
    """One pair predicted at 1.008 s for the 8-token answer at any load up to 8: it sustains
    8; the standard class (0.75) may fill 6 once the fleet is pressed."""
    entry = pair_entry("fam", "fp16", urls=[URL], ttft_base_s=1.0)
    entry["latency"]["max_profiled_load"] = 8
    return make_table([entry])


def held(release: asyncio.Event) -> FakeUpstream:
    """An engine that holds every answer until `release`."""

    def answer(_: UpstreamRequest) -> FakeResponse:
        return FakeResponse(body=chat_json(), gate=release)

    return FakeUpstream(by_url({URL: answer}))


Client = TestClient[web.Request, web.Application]


@pytest.fixture
async def two_replicas(
    aiohttp_client: AiohttpClient,
    redis_server: RedisProcess,
    redis_keys: RedisKeys,
    redis_client: aioredis.Redis,
    tmp_path: Path,
) -> AsyncIterator[tuple[list[Client], list[FakeUpstream], FakeClock, asyncio.Event]]:
    """Replicas a and b sharing in-flight counts every 25 ms, on one moved clock, each in
    front of a held engine at the same URL; the table published to Redis."""
    await Publishing(redis_client, redis_keys).publish(eight_slots())
    clock, release = FakeClock(), asyncio.Event()
    clients, upstreams = [], []
    for name in ("a", "b"):
        upstream = held(release)
        settings = plane_settings(
            redis_server.url,
            redis_keys,
            tmp_path / f"dp-{name}" / "table.json",
            instance_id=f"dp-{name}",
            priority_header_trusted=True,  # the test's client stands for a trusted gateway
            in_flight_share_interval_ms=25,
            scrape_interval_s=0.0,
            engine_deadline_factor=0,
        )
        deps = AppDeps(clock=clock, rng=random.Random(7), upstream=upstream)
        clients.append(await aiohttp_client(create_app(settings, deps)))
        upstreams.append(upstream)
    apps = [c.app for c in clients]
    await eventually(lambda: all(a[STORE].version is not None for a in apps), timeout_s=10)
    try:
        yield clients, upstreams, clock, release
    finally:
        release.set()  # nothing left held when the apps close


async def ask(client: Client, headers: dict[str, str]) -> int:
    resp = await client.post("/v1/chat/completions", data=BODY, headers=headers)
    await resp.read()
    return resp.status


def metric(app: web.Application, name: str, **labels: str) -> float:
    value = app[METRICS].registry.get_sample_value(name, labels)
    return 0.0 if value is None else value


def pair_of(app: web.Application) -> str:
    table = app[STORE].current
    assert table is not None
    return table.pairs[0].pair


def reserve_seen(app: web.Application, rps: float) -> Callable[[], bool]:
    """The app's rate of the bands above standard at the pair has reached `rps`."""
    return lambda: app[ARRIVALS].above(STANDARD_SHARE).get(pair_of(app), 0.0) >= rps


async def test_the_other_replicas_critical_arrivals_shrink_this_replicas_standard_line(
    two_replicas: tuple[list[Client], list[FakeUpstream], FakeClock, asyncio.Event],
) -> None:
    """4 critical requests decided at b in the last second (1.008 s each: 4.03 of the pair's
    8): at a, which decided none, a standard request beside them (5 in flight with it, the
    fleet not pressed) waits, and a's next critical request goes in at once. Fails before
    the band arrivals were shared: a counted only its own, reserved nothing and sent the
    standard request as the 5th. Once the window passes it goes in."""
    (a, b), (engine_a, engine_b), clock, release = two_replicas
    critical = [asyncio.create_task(ask(b, CRITICAL)) for _ in range(4)]
    await eventually(lambda: len(engine_b.requests) == 4, what="4 critical in flight at b")
    clock.advance(BUCKET_S)  # their bucket is whole: the rate counts them
    endpoint = f"{pair_of(a.app)}#0"
    await eventually(
        lambda: a.app[HEALTH].tracker.peers_in_flight().get(endpoint) == 4.0,
        what="a sees b's 4 in flight",
    )
    await eventually(reserve_seen(a.app, 4.0), what="a sees b's critical arrivals")
    assert a.app[ARRIVALS].above(CRITICAL_SHARE) == {}  # the top band: none above it

    standard = asyncio.create_task(ask(a, BUDGET))
    await eventually(lambda: metric(a.app, "gearbox_flow_queue_length", **STANDARD) == 1)
    assert engine_a.requests == []  # not sent into the reserve b's requests hold
    mine = asyncio.create_task(ask(a, CRITICAL))
    await eventually(lambda: len(engine_a.requests) == 1, what="a's critical one goes in")
    assert metric(a.app, "gearbox_flow_queue_length", **STANDARD) == 1

    clock.advance(WINDOW_S + BUCKET_S)  # b's burst leaves the window
    await eventually(lambda: len(engine_a.requests) == 2, what="the standard one goes in")
    release.set()
    assert list(await asyncio.gather(*critical, mine, standard)) == [200] * 6
    assert metric(a.app, "gearbox_flow_dispatched_total", **STANDARD) == 1


async def test_standard_arrivals_are_shared_for_batchs_line_and_gone_once_quiet(
    two_replicas: tuple[list[Client], list[FakeUpstream], FakeClock, asyncio.Event],
    redis_client: aioredis.Redis,
    redis_keys: RedisKeys,
) -> None:
    """Standard requests at b are shared (batch's line reserves against them); what b shares
    is gone from a's view once b's window is empty, and the group's index then holds the
    band's name beside the endpoint's (no key of its own: the same sums)."""
    (a, b), (_, engine_b), clock, release = two_replicas
    standard = [asyncio.create_task(ask(b, BUDGET)) for _ in range(2)]
    await eventually(lambda: len(engine_b.requests) == 2, what="2 standard in flight at b")
    clock.advance(BUCKET_S)
    batch = 0.5
    pair = pair_of(a.app)
    await eventually(lambda: a.app[ARRIVALS].above(batch).get(pair) == 2.0, what="a sees them")
    assert a.app[ARRIVALS].above(STANDARD_SHARE) == {}
    release.set()
    assert list(await asyncio.gather(*standard)) == [200] * 2
    clock.advance(WINDOW_S)
    await eventually(lambda: a.app[ARRIVALS].above(batch) == {}, what="b's window is empty")
    names = await _index_names(redis_client, redis_keys)
    assert f"{pair}#0" in names
    assert any(name.endswith(f"\x1f{pair}") for name in names)


async def _index_names(client: aioredis.Redis, keys: RedisKeys) -> set[str]:
    """Every name the in-flight groups' indexes hold (one group on a standalone Redis)."""
    index: dict[Any, Any] = await client.hgetall(keys.in_flight_group(0, 1).index)
    return {bytes(name).decode() for name in index if name}


async def test_behind_nginx_each_replica_reserves_for_both_replicas_critical_requests(
    two_replicas: tuple[list[Client], list[FakeUpstream], FakeClock, asyncio.Event],
    tmp_path: Path,
) -> None:
    """4 critical requests through a real nginx (round robin: 2 to each replica), 1.008 s
    each: each replica keeps room for all 4 (4.03 of the pair's 8), so a standard request,
    whichever replica nginx gives it, waits beside them (5 in flight with it), while a
    critical one goes in. Fails before: each replica reserved only for its own 2 (2.02: a
    line of 5) and sent the standard request at once."""
    (a, b), (engine_a, engine_b), clock, release = two_replicas
    apps = [a.app, b.app]
    servers = [(c.server.port, 1) for c in (a, b) if c.server.port is not None]
    with running_nginx(tmp_path / "nginx", servers) as lb:
        url = f"http://127.0.0.1:{lb}/v1/chat/completions"
        async with aiohttp.ClientSession() as session:

            async def ask_lb(headers: dict[str, str]) -> int:
                async with session.post(url, data=BODY, headers=headers) as resp:
                    await resp.read()
                    return resp.status

            critical = [asyncio.create_task(ask_lb(CRITICAL)) for _ in range(4)]
            await eventually(
                lambda: (len(engine_a.requests), len(engine_b.requests)) == (2, 2),
                what="2 critical in flight at each replica",
            )
            clock.advance(BUCKET_S)
            await eventually(lambda: all(reserve_seen(app, 4.0)() for app in apps))
            endpoint = f"{pair_of(a.app)}#0"
            await eventually(
                lambda: all(
                    app[HEALTH].tracker.peers_in_flight().get(endpoint) == 2.0 for app in apps
                ),
                what="each replica sees the other's 2 in flight",
            )

            def waiting() -> float:
                return sum(metric(app, "gearbox_flow_queue_length", **STANDARD) for app in apps)

            def sent() -> int:
                return len(engine_a.requests) + len(engine_b.requests)

            standard = asyncio.create_task(ask_lb(BUDGET))
            await eventually(lambda: waiting() == 1, what="the standard request waits")
            assert sent() == 4
            mine = asyncio.create_task(ask_lb(CRITICAL))
            await eventually(lambda: sent() == 5, what="the next critical one goes in")
            assert waiting() == 1
            clock.advance(WINDOW_S + BUCKET_S)
            await eventually(lambda: sent() == 6, what="the standard one goes in")
            release.set()
            assert list(await asyncio.gather(*critical, mine, standard)) == [200] * 6
