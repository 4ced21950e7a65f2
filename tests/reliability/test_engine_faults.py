"""Engine faults under steady load: a killed engine process, every engine down, a sick fleet
answering 503 (the retry budget), and engines too slow for the request's budget."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from contracts.redis_keys import RedisKeys
from control_plane.store.publisher import Publisher
from simulator import FaultConfig, SimFleetConfig, run_fleet
from tests.reliability.conftest import StartDataPlane
from tests.reliability.processes import Child, SimProcess
from tests.reliability.stack import (
    CHEAP,
    PRICEY,
    SteadyLoad,
    chat_body,
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

CHEAP_EP = f"{pair_of(CHEAP)}#0"
PRICEY_EP = f"{pair_of(PRICEY)}#0"


def failed_attempts(app: web.Application, endpoint: str) -> float:
    outcomes = ("connect_failed", "timeout_connect", "timeout_first_byte", "status_5xx")
    return sum(
        metric(app, "gearbox_upstream_attempts_total", endpoint=endpoint, outcome=o)
        for o in outcomes
    )


def transitions(app: web.Application, endpoint: str, to: str) -> float:
    return metric(app, "gearbox_circuit_transitions_total", endpoint=endpoint, to=to)


async def post_chat(
    session: aiohttp.ClientSession, url: str, headers: dict[str, str] | None = None, **kw: Any
) -> tuple[int, dict[str, str], Any, float]:
    started = time.monotonic()
    async with session.post(
        f"{url}/v1/chat/completions", json=chat_body(**kw), headers=headers
    ) as r:
        body = await r.json(content_type=None)
        return r.status, dict(r.headers), body, time.monotonic() - started


async def test_killed_engine_fails_over_with_zero_errors_and_breaker_recovers(
    tmp_path: Path,
    children: list[Child],
    publisher: Publisher,
    redis_server: RedisProcess,
    redis_keys: RedisKeys,
    snapshot: Path,
    start_data_plane: StartDataPlane,
) -> None:
    cheap = SimProcess([sim_pair(CHEAP)], tmp_path, "cheap")
    pricey = SimProcess([sim_pair(PRICEY)], tmp_path, "pricey")
    children += [cheap, pricey]
    await asyncio.gather(cheap.start(), pricey.start())
    urls = {CHEAP: [cheap.url(served_name(CHEAP))], PRICEY: [pricey.url(served_name(PRICEY))]}
    published = await publisher.publish(fleet_table(urls))
    settings = dp_settings(redis_server.url, redis_keys.prefix, snapshot)
    plane = await start_data_plane(settings)
    await eventually(lambda: plane.version == published.version, what="table loaded")
    k = settings.breaker.consecutive_failures

    async with SteadyLoad(plane.url, workers=4) as load:
        await load.answered(40)
        assert load.tally.pairs[pair_of(CHEAP)] == load.tally.total  # the cheap pair serves

        await cheap.kill()
        await eventually(
            lambda: metric(plane.app, "gearbox_circuit_state", endpoint=CHEAP_EP) == 2,
            timeout_s=10,
            what="breaker open",
        )
        await load.answered(60)  # served by the fallback pair meanwhile
        failed_while_down = failed_attempts(plane.app, CHEAP_EP)
        probes = transitions(plane.app, CHEAP_EP, "half_open")

        served_before_restart = load.tally.pairs[pair_of(CHEAP)]
        await cheap.start()
        await eventually(
            lambda: metric(plane.app, "gearbox_circuit_state", endpoint=CHEAP_EP) == 0,
            timeout_s=15,
            what="breaker closed after the engine returned",
        )
        await load.answered(40)

    tally = load.tally
    assert tally.problems == [], tally.problems[:5]
    assert set(tally.statuses) == {200}
    assert tally.pairs[pair_of(PRICEY)] >= 60  # the fallback carried the outage
    assert tally.pairs[pair_of(CHEAP)] > served_before_restart  # and the engine is back
    # Opened within K failures: K in a row, plus requests already on the wire when it died,
    # plus one failed half-open probe per cooldown that ended before the restart.
    assert failed_while_down <= k + load.workers + probes
    assert transitions(plane.app, CHEAP_EP, "open") >= 1
    assert transitions(plane.app, CHEAP_EP, "closed") >= 1
    assert transitions(plane.app, PRICEY_EP, "open") == 0


async def test_every_engine_down_answers_503_with_retry_after_quickly(
    tmp_path: Path,
    children: list[Child],
    publisher: Publisher,
    redis_server: RedisProcess,
    redis_keys: RedisKeys,
    snapshot: Path,
    start_data_plane: StartDataPlane,
) -> None:
    sims = SimProcess([sim_pair(CHEAP), sim_pair(PRICEY)], tmp_path)
    children.append(sims)
    await sims.start()
    urls = {q: [sims.url(served_name(q))] for q in (CHEAP, PRICEY)}
    published = await publisher.publish(fleet_table(urls))
    settings = dp_settings(redis_server.url, redis_keys.prefix, snapshot)
    plane = await start_data_plane(settings)
    await eventually(lambda: plane.version == published.version, what="table loaded")
    k = settings.breaker.consecutive_failures
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as session:
        assert (await post_chat(session, plane.url))[0] == 200
        await sims.kill()
        answers = [await post_chat(session, plane.url) for _ in range(30)]

    for status, headers, body, elapsed_s in answers:
        assert status == 503, body
        assert body["error"]["code"] == "no_healthy_upstream"
        assert set(body["error"]) == {"message", "type", "param", "code"}
        assert int(headers["Retry-After"]) >= 1
        assert elapsed_s < 10  # no hang: a refused connection fails at once
    attempts = probes = 0.0
    for ep in (CHEAP_EP, PRICEY_EP):
        attempts += metric(
            plane.app, "gearbox_upstream_attempts_total", endpoint=ep, outcome="connect_failed"
        )
        probes += transitions(plane.app, ep, "half_open")
        assert transitions(plane.app, ep, "open") >= 1
    # K failures open each endpoint's breaker; after that only one probe per cooldown goes
    # out, so 30 requests make far fewer than the 60 attempts of walking both endpoints.
    assert attempts <= 2 * k + probes
    assert probes < 10


async def test_sick_fleet_is_not_hit_by_a_retry_storm(
    publisher: Publisher,
    redis_server: RedisProcess,
    redis_keys: RedisKeys,
    snapshot: Path,
    start_data_plane: StartDataPlane,
) -> None:
    """Every engine answers 503. Breakers are set so they never trip, so only the retry
    budget (20% of requests + 1/s over 10 s) stands between the fleet and 3 attempts each."""
    n_requests, ratio, floor = 120, 0.2, 10
    sick = FaultConfig(error_rate=1.0, error_status=503)
    config = SimFleetConfig(pairs=[sim_pair(q, faults=sick) for q in (CHEAP, PRICEY)])
    async with run_fleet(config, answers={}) as fleet:
        urls = {q: [fleet.url(served_name(q))] for q in (CHEAP, PRICEY)}
        published = await publisher.publish(fleet_table(urls))
        settings = dp_settings(
            redis_server.url,
            redis_keys.prefix,
            snapshot,
            breaker_consecutive_failures=100_000,
            breaker_min_requests=100_000,
            max_attempts=3,
            retry_budget_ratio=ratio,
            retry_budget_min_per_s=floor / 10,
            retry_budget_window_s=10.0,
        )
        plane = await start_data_plane(settings)
        await eventually(lambda: plane.version == published.version, what="table loaded")
        async with aiohttp.ClientSession() as session:
            sem = asyncio.Semaphore(6)

            async def one() -> tuple[int, dict[str, str], Any, float]:
                async with sem:
                    return await post_chat(session, plane.url)

            answers = await asyncio.gather(*(one() for _ in range(n_requests)))
        received = sum(fleet.stats(served_name(q)).received for q in (CHEAP, PRICEY))

    for status, headers, body, _ in answers:
        assert status in (502, 503), body
        assert set(body["error"]) == {"message", "type", "param", "code"}
        if status == 503:
            assert int(headers["Retry-After"]) >= 1
    # Without a budget the fleet would see up to 2 attempts per request (2 endpoints).
    assert received <= n_requests * (1 + ratio) + floor
    assert metric(plane.app, "gearbox_retry_budget_exhausted_total") > 0


async def test_slow_engines_meet_the_budget_deadline_and_leave_no_queue(
    publisher: Publisher,
    redis_server: RedisProcess,
    redis_keys: RedisKeys,
    snapshot: Path,
    start_data_plane: StartDataPlane,
) -> None:
    """One engine hangs (no headers ever), the other is 30 s late on its first token. A
    request with an 800 ms budget ends at its deadline with a 504, and nothing stays queued
    in the engines or in flight in the router."""
    budget_ms, grace_s, n = 800, 0.2, 40
    faults = {
        CHEAP: FaultConfig(hang_rate=1.0),
        PRICEY: FaultConfig(slow_first_token_rate=1.0, slow_first_token_s=30.0),
    }
    config = SimFleetConfig(pairs=[sim_pair(q, faults=f) for q, f in faults.items()])
    async with run_fleet(config, answers={}) as fleet:
        urls = {q: [fleet.url(served_name(q))] for q in (CHEAP, PRICEY)}
        published = await publisher.publish(fleet_table(urls))
        settings = dp_settings(
            redis_server.url, redis_keys.prefix, snapshot, deadline_grace_s=grace_s
        )
        plane = await start_data_plane(settings)
        await eventually(lambda: plane.version == published.version, what="table loaded")
        headers = {"X-Latency-Budget-Ms": str(budget_ms)}
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60)) as session:
            started = time.monotonic()
            answers = await asyncio.gather(
                *(post_chat(session, plane.url, headers, stream=i % 2 == 1) for i in range(n))
            )
            wall_s = time.monotonic() - started

        for status, got, body, elapsed_s in answers:
            assert status == 504, body
            assert body["error"]["code"] == "budget_exhausted"
            assert got["x-should-retry"] == "false"
            assert elapsed_s >= budget_ms / 1000  # not given up early either
        assert wall_s < budget_ms / 1000 + grace_s + 10  # generous: a shared 2-core machine

        def drained() -> bool:
            engines_idle = all(
                fleet.stats(served_name(q)).running + fleet.stats(served_name(q)).waiting == 0
                for q in (CHEAP, PRICEY)
            )
            in_flight = sum(
                metric(plane.app, "gearbox_in_flight_requests", endpoint=ep)
                for ep in (CHEAP_EP, PRICEY_EP)
            )
            return engines_idle and in_flight == 0

        await eventually(drained, timeout_s=10, what="engines and router drained")
        cancelled = sum(fleet.stats(served_name(q)).cancelled for q in (CHEAP, PRICEY))
        received = sum(fleet.stats(served_name(q)).received for q in (CHEAP, PRICEY))
        assert received >= n
        assert cancelled == received  # every abandoned attempt was aborted at the engine
