"""Lack of progress is judged per endpoint over time (docs/reliability.md, "What a breaker
counts"; `data_plane/progress/stall.py`): an endpoint is blamed only when it sent no byte on
ANY attempt for its stall window while some attempt at it was overdue by its own pace.

Simulated engines behind a data plane from `create_app`, as in `test_engine_blame.py` (the
cheap pair's table: TTFT about 28 ms and TPOT about 6 ms at load 1; K consecutive failures
open a breaker; the stall window is the default 1.5 s).
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import aiohttp
import pytest

from simulator import FaultConfig, SimFleetConfig, run_fleet
from tests.hostile.test_engine_blame import (
    AS_PROFILED,
    CHEAP_EP,
    PRICEY_EP,
    K,
    blamed,
    chat,
    data_plane,
    opened,
    post,
)
from tests.reliability.stack import CHEAP, PRICEY, metric, pair_of, served_name, sim_pair
from tests.support.virtual_time import on_virtual_time

pytestmark = pytest.mark.integration


@on_virtual_time
async def test_an_engine_five_times_slower_than_its_profile_keeps_answering_unejected(
    tmp_path: Path,
) -> None:
    """Cores shared with other engines, one request at a time: 80 tokens non-streamed, which
    the profile puts at 0.51 s, take about 2.55 s. The per-attempt limit (3 x 0.51 + 0.5 =
    2.03 s, no progress elsewhere to excuse it) abandoned every attempt, so the engine's pace
    was never seen, and K of them opened its breaker: all traffic went to the dearer pair.
    Judged per endpoint, the first attempt is overdue at 1.53 s and the endpoint may stay
    silent 1.53 s more (the window is the longest overdue allowance); the answer comes first,
    its pace (x5) is learned, and the engine keeps its traffic, streams included."""
    slow = FaultConfig(slowdown_factor=5.0)
    config = SimFleetConfig(pairs=[sim_pair(CHEAP, **AS_PROFILED, faults=slow), sim_pair(PRICEY)])
    async with run_fleet(config, answers={}) as fleet:
        urls = {q: [fleet.url(served_name(q))] for q in (CHEAP, PRICEY)}
        async with (
            data_plane(urls, tmp_path) as (url, app),
            aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60)) as session,
        ):
            body = chat("Summarise the plot of a short story.", max_tokens=80)
            for _ in range(K):
                status, pair, raw = await post(session, url, body, 8000)
                assert (status, pair) == (200, pair_of(CHEAP)), raw[:300]
            stream = chat("Say hello.", max_tokens=8, stream=True)
            answers = await asyncio.gather(*(post(session, url, stream, 8000) for _ in range(3)))
            for status, pair, raw in answers:
                assert (status, pair) == (200, pair_of(CHEAP)), raw[:300]
            assert blamed(app, CHEAP_EP) == 0
            assert opened(app, CHEAP_EP) == 0
            assert fleet.stats(served_name(PRICEY)).received == 0


@on_virtual_time
async def test_a_hung_engine_behind_short_deadlines_is_caught_across_attempts(
    tmp_path: Path,
) -> None:
    """An engine that never answers, asked by clients whose deadline (500 ms budget + 0.5 s
    grace) ends each attempt before the stall window: the silence past each attempt's
    allowance (3 x 28 ms) adds up across attempts, since no byte ever resets it, so the
    second attempt ends in a stall, and each later one once overdue: its breaker opens
    within a few requests. Meanwhile every client is served by the next pair: an overdue
    attempt is given up for the client's sake while the next pair still has twice its
    predicted time before the deadline (`Proxy._handover_limit`, no blame); before, such
    attempts ran into the deadline and the clients got 504."""
    config = SimFleetConfig(
        pairs=[sim_pair(CHEAP, faults=FaultConfig(hang_rate=1.0)), sim_pair(PRICEY)]
    )
    async with run_fleet(config, answers={}) as fleet:
        urls = {q: [fleet.url(served_name(q))] for q in (CHEAP, PRICEY)}
        async with (
            data_plane(urls, tmp_path) as (url, app),
            aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60)) as session,
        ):
            body = chat("Say hello.", max_tokens=8, stream=True)
            sent = 0
            while opened(app, CHEAP_EP) == 0 and sent < K + 3:
                status, pair, raw = await post(session, url, body, 500)
                assert (status, pair) == (200, pair_of(PRICEY)), raw[:300]
                sent += 1
            assert opened(app, CHEAP_EP) == 1, sent
            assert 1 <= blamed(app, CHEAP_EP) <= K  # fewer when its still counters open it
            status, pair, raw = await post(session, url, body, 500)
            assert (status, pair) == (200, pair_of(PRICEY)), raw[:300]


@on_virtual_time
async def test_tiny_budgets_sent_again_and_again_never_blame_a_healthy_engine(
    tmp_path: Path,
) -> None:
    """One client's budgets end its attempts before the engine answers, ten at a time, again
    and again: streams with a 50 ms TTFT budget on an engine answering within its own pace but
    slower than that (twice its profile, about 60 ms to the first token), and non-streamed
    answers without max_tokens (700 tokens, about 8 s here) cut by a 3 s latency budget. That
    is the client's business: the engine's silence counts only past each attempt's own
    allowance (3 x its profile for the work; the context limit for the long answers), which
    these never reach. No breaker counts anything, and a plain request after them is served."""
    slow = FaultConfig(slowdown_factor=2.0)
    cheap = sim_pair(CHEAP, **AS_PROFILED, faults=slow, default_max_tokens=700)
    config = SimFleetConfig(pairs=[cheap, sim_pair(PRICEY, faults=slow, default_max_tokens=700)])
    async with run_fleet(config, answers={}) as fleet:
        urls = {q: [fleet.url(served_name(q))] for q in (CHEAP, PRICEY)}
        async with (
            data_plane(urls, tmp_path) as (url, app),
            aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60)) as session,
        ):
            ttft = {"X-TTFT-Budget-Ms": "50"}
            stream = chat("Say hello.", max_tokens=50, stream=True)
            essay = chat("Write an essay.", model=pair_of(CHEAP))
            statuses: list[int] = []
            for _ in range(3):
                batch = [post(session, url, stream, 10_000, ttft) for _ in range(10)]
                statuses += [status for status, _, _ in await asyncio.gather(*batch)]
            essays = [post(session, url, essay, 3000) for _ in range(10)]
            statuses += [status for status, _, _ in await asyncio.gather(*essays)]
            missed = {"endpoint": CHEAP_EP, "outcome": "ttft_budget_missed"}
            assert metric(app, "gearbox_upstream_attempts_total", **missed) > 0
            assert statuses.count(504) >= 10  # the essays' deadlines, at least
            for endpoint in (CHEAP_EP, PRICEY_EP):
                assert opened(app, endpoint) == 0
                assert blamed(app, endpoint) == 0
                assert metric(app, "gearbox_circuit_state", endpoint=endpoint) == 0
            status, _, raw = await post(session, url, chat("Say hello.", max_tokens=8))
            assert status == 200, raw[:300]


@on_virtual_time
async def test_five_attempts_overdue_at_once_are_one_stall_not_five_failures(
    tmp_path: Path,
) -> None:
    """Five streams at once on an engine whose first byte comes 2 s late (cores starved by
    another engine, the real-engine demo): all five are overdue at once and the endpoint's
    silence passes the window (1.5 s) just before it would answer. That is one silence, one
    observation: the stall counts once against its breaker (five failures opened it, K = 3
    here), the five clients move to the next pair as before, and a request only this engine
    can serve then waits for its answer: 200, and the breaker never opens."""
    late = FaultConfig(slow_first_token_rate=1.0, slow_first_token_s=2.0)
    config = SimFleetConfig(pairs=[sim_pair(CHEAP, **AS_PROFILED, faults=late), sim_pair(PRICEY)])
    async with run_fleet(config, answers={}) as fleet:
        urls = {q: [fleet.url(served_name(q))] for q in (CHEAP, PRICEY)}
        async with (
            data_plane(urls, tmp_path) as (url, app),
            aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60)) as session,
        ):
            body = chat("Say hello.", max_tokens=8, stream=True)
            answers = await asyncio.gather(*(post(session, url, body, 8000) for _ in range(5)))
            for status, pair, raw in answers:
                assert (status, pair) == (200, pair_of(PRICEY)), raw[:300]
            assert blamed(app, CHEAP_EP) == 5  # ended as lack of progress, counted once
            assert opened(app, CHEAP_EP) == 0
            only = chat("Say hello.", max_tokens=8, stream=True, model=pair_of(CHEAP))
            status, pair, raw = await post(session, url, only, 8000)
            assert (status, pair) == (200, pair_of(CHEAP)), raw[:300]
            assert opened(app, CHEAP_EP) == 0
            assert metric(app, "gearbox_circuit_state", endpoint=CHEAP_EP) == 0


@on_virtual_time
async def test_a_slow_engine_that_is_the_only_choice_answers_late_rather_than_504(
    tmp_path: Path,
) -> None:
    """The request can go to one pair only (the only one meeting its floor, here named by
    `model`), on an engine 80x slower than its profile: its first byte comes after about
    2.4 s, past its allowance (3 x 28 ms) and the stall window (1.5 s), well within the
    client's 8 s budget. Ending the attempt at the stall left the client nowhere to go (504
    "no engine made progress"); it now waits for the client's own deadline and is served."""
    slow = FaultConfig(slowdown_factor=80.0)
    config = SimFleetConfig(pairs=[sim_pair(CHEAP, **AS_PROFILED, faults=slow), sim_pair(PRICEY)])
    async with run_fleet(config, answers={}) as fleet:
        urls = {q: [fleet.url(served_name(q))] for q in (CHEAP, PRICEY)}
        async with (
            data_plane(urls, tmp_path) as (url, app),
            aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60)) as session,
        ):
            only = chat("Say hello.", max_tokens=2, stream=True, model=pair_of(CHEAP))
            status, pair, raw = await post(session, url, only, 8000)
            assert (status, pair) == (200, pair_of(CHEAP)), raw[:300]
            assert b"[DONE]" in raw
            assert opened(app, CHEAP_EP) == 0
            assert fleet.stats(served_name(PRICEY)).received == 0


@on_virtual_time
async def test_a_hung_engine_that_is_the_only_choice_releases_its_clients_at_the_hang(
    tmp_path: Path,
) -> None:
    """A request that can go to one pair only, on an engine that never answers, with a 30 s
    budget: the stalls before the hang leave its attempt waiting (it has nowhere else to go),
    the hang (`PROGRESS_OPEN_WINDOWS` x the 1.5 s window of silence) opens the breaker and
    ends the attempt, so the client gets its 504 after about 4.6 s, not at its deadline (30.5 s;
    300 s for a request without a budget)."""
    config = SimFleetConfig(
        pairs=[sim_pair(CHEAP, faults=FaultConfig(hang_rate=1.0)), sim_pair(PRICEY)]
    )
    async with run_fleet(config, answers={}) as fleet:
        urls = {q: [fleet.url(served_name(q))] for q in (CHEAP, PRICEY)}
        async with (
            data_plane(urls, tmp_path) as (url, app),
            aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60)) as session,
        ):
            only = chat("Say hello.", max_tokens=2, stream=True, model=pair_of(CHEAP))
            started = asyncio.get_running_loop().time()
            status, _, raw = await post(session, url, only, 30_000)
            waited_s = asyncio.get_running_loop().time() - started
            assert status == 504, raw[:300]
            assert b"progress" in raw, raw[:300]
            assert waited_s < 20.0, waited_s  # the hang, not the 30.5 s deadline
            assert opened(app, CHEAP_EP) == 1
            assert fleet.stats(served_name(PRICEY)).received == 0
