"""A hung engine is told from a starved or busy one by its own token counters (docs/
reliability.md, "What a breaker counts"; `data_plane/progress/stillness.py`): while our
attempts wait overdue the stall guard reads the engine's `/metrics`, and counters that do not
move across `PROGRESS_STILL_WINDOWS` (2) windows of waiting open its breaker; counters that move
leave the stall windows' rules as they are.

Simulated engines behind a data plane from `create_app`, as in `test_engine_stall.py` (the
simulator's `/metrics` has vLLM's `vllm:prompt_tokens_total` and
`vllm:generation_tokens_total`, per served model).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web

from simulator import FaultConfig, SimFleetConfig, run_fleet
from tests.hostile.test_engine_blame import (
    AS_PROFILED,
    CHEAP_EP,
    PRICEY_EP,
    chat,
    data_plane,
    opened,
    post,
)
from tests.reliability.stack import CHEAP, PRICEY, metric, pair_of, served_name, sim_pair
from tests.support.virtual_time import on_virtual_time
from tests.support.waiting import eventually

pytestmark = pytest.mark.integration

# The stall windows alone open no breaker in a test's time: their hang needs 100 windows of
# silence (150 s) and the breaker 100 stalls in a row. What opens one here is the counters.
WINDOWS_OFF = {"engine_stall_open_windows": 100, "breaker_consecutive_failures": 100}
COUNTERS_WHY = "token counters did not move"


async def _clients(
    session: aiohttp.ClientSession, url: str, body: dict[str, object], budget_ms: int, n: int
) -> tuple[list[asyncio.Task[None]], list[int]]:
    """`n` closed-loop clients sending `body` again and again; the statuses they got."""
    statuses: list[int] = []

    async def client() -> None:
        while True:
            status, _, _ = await post(session, url, body, budget_ms)
            statuses.append(status)

    return [asyncio.create_task(client()) for _ in range(n)], statuses


async def _stop(tasks: list[asyncio.Task[None]]) -> None:
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


async def _until_opened_on_counters(
    session: aiohttp.ClientSession,
    plane: tuple[str, web.Application],
    clients: int,
    caplog: pytest.LogCaptureFixture,
) -> list[int]:
    """`clients` closed-loop clients (3 s budgets) until the cheap endpoint's breaker opens
    (within 20 s, generous for a loaded machine), which the log must put on its counters;
    the statuses they got."""
    url, app = plane
    body = chat("Say hello.", max_tokens=8, stream=True)
    with caplog.at_level(logging.WARNING, logger="data_plane"):
        tasks, statuses = await _clients(session, url, body, 3000, clients)
        try:
            await eventually(lambda: opened(app, CHEAP_EP) > 0, timeout_s=20.0, what="breaker open")
        finally:
            await _stop(tasks)
    assert any(COUNTERS_WHY in r.getMessage() for r in caplog.records)
    return statuses


@on_virtual_time
async def test_a_hung_engine_is_ejected_on_its_still_counters_alone(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """An engine that takes requests and never answers (its `/metrics` still serves): four
    closed-loop clients (3 s budgets, room to spare on a loaded machine) whose overdue
    attempts move to the next pair at each stall window. Its counters stay at 0 across 3
    windows (4.5 s) of our attempts waiting, so its breaker opens about 5 s after the first
    request, with the stall windows' own hang and breaker count out of reach (WINDOWS_OFF:
    150 s and 100 stalls). On main nothing opened it within the deadline (20 s, generous for
    a loaded machine)."""
    config = SimFleetConfig(
        pairs=[sim_pair(CHEAP, faults=FaultConfig(hang_rate=1.0)), sim_pair(PRICEY)]
    )
    async with run_fleet(config, answers={}) as fleet:
        urls = {q: [fleet.url(served_name(q))] for q in (CHEAP, PRICEY)}
        async with (
            data_plane(urls, tmp_path, **WINDOWS_OFF) as (url, app),
            aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60)) as session,
        ):
            statuses = await _until_opened_on_counters(session, (url, app), 4, caplog)
            assert metric(app, "gearbox_circuit_state", endpoint=CHEAP_EP) == 2
            assert opened(app, PRICEY_EP) == 0
            assert statuses  # the next pair served every one of them
            assert set(statuses) == {200}, statuses


@asynccontextmanager
async def _frozen_server() -> AsyncIterator[str]:
    """A process that accepts connections and never answers anything, `/metrics` included
    (stopped, or deadlocked): its URL."""
    held: list[asyncio.StreamWriter] = []

    async def hold(_: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        held.append(writer)

    server = await asyncio.start_server(hold, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        for writer in held:
            writer.close()
        server.close()
        await server.wait_closed()


@on_virtual_time
async def test_a_frozen_process_is_ejected_when_its_metrics_do_not_answer_twice(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """An engine process that takes connections and answers nothing, not even `/metrics`:
    every read across 3 windows of waiting times out (1 s each), so its
    breaker opens, with the windows' hang and count out of reach (WINDOWS_OFF); on main
    nothing opened it within the deadline (20 s)."""
    config = SimFleetConfig(pairs=[sim_pair(PRICEY)])
    async with run_fleet(config, answers={}) as fleet, _frozen_server() as frozen:
        urls = {CHEAP: [frozen], PRICEY: [fleet.url(served_name(PRICEY))]}
        async with (
            data_plane(urls, tmp_path, **WINDOWS_OFF) as (url, app),
            aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60)) as session,
        ):
            statuses = await _until_opened_on_counters(session, (url, app), 2, caplog)
            assert statuses
            assert set(statuses) == {200}, statuses


@on_virtual_time
async def test_a_hung_engine_that_is_the_only_choice_releases_its_client_on_its_counters(
    tmp_path: Path,
) -> None:
    """One request that only the hung engine may serve, with a 60 s budget: the counters'
    hang ends its attempt too (it has nowhere else to go, and waiting on a hung engine only
    holds the client), so it gets its 504 long before its deadline; on main it waited for the
    deadline (WINDOWS_OFF: the windows' hang at 150 s)."""
    config = SimFleetConfig(
        pairs=[sim_pair(CHEAP, faults=FaultConfig(hang_rate=1.0)), sim_pair(PRICEY)]
    )
    async with run_fleet(config, answers={}) as fleet:
        urls = {q: [fleet.url(served_name(q))] for q in (CHEAP, PRICEY)}
        async with (
            data_plane(urls, tmp_path, **WINDOWS_OFF) as (url, app),
            aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=90)) as session,
        ):
            only = chat("Say hello.", max_tokens=2, stream=True, model=pair_of(CHEAP))
            started = asyncio.get_running_loop().time()
            status, _, raw = await post(session, url, only, 60_000)
            waited_s = asyncio.get_running_loop().time() - started
            assert status == 504, raw[:300]
            assert waited_s < 30.0, waited_s  # the counters' hang, not the 60.5 s deadline
            assert opened(app, CHEAP_EP) == 1


@on_virtual_time
async def test_an_engine_busy_for_others_is_not_ejected_while_ours_wait(
    tmp_path: Path,
) -> None:
    """The engine has one slot, held for about 6 s by another replica's long answer (sent to
    the engine directly); our request, which only it may serve, waits in its queue without a
    byte, past its allowance and past three windows of silence (4.5 s): on main that silence
    was a hang, its breaker opened and our client got a 504. Its counters move all along (the
    other answer's tokens): it works, for someone, so no hang and no count once two readings
    show it; our request is served when the slot frees."""
    busy = sim_pair(CHEAP, ttft_base_s=0.03, tpot_base_s=0.02, max_running=1)
    config = SimFleetConfig(pairs=[busy, sim_pair(PRICEY)])
    async with run_fleet(config, answers={}) as fleet:
        urls = {q: [fleet.url(served_name(q))] for q in (CHEAP, PRICEY)}
        async with (
            data_plane(urls, tmp_path) as (url, app),
            aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=90)) as session,
        ):
            direct = fleet.url(served_name(CHEAP))
            other = chat("Write a long story.", model=served_name(CHEAP), max_tokens=300)
            other_task = asyncio.create_task(post(session, direct, other))
            await eventually(lambda: fleet.stats(served_name(CHEAP)).received >= 1)
            ours = chat("Say hello.", max_tokens=2, stream=True, model=pair_of(CHEAP))
            status, pair, raw = await post(session, url, ours, 60_000)
            assert (status, pair) == (200, pair_of(CHEAP)), raw[:300]
            other_status, _, _ = await other_task
            assert other_status == 200
            assert opened(app, CHEAP_EP) == 0
            assert fleet.stats(served_name(PRICEY)).received == 0


@on_virtual_time
async def test_a_tenants_long_answers_do_not_eject_the_engine_its_neighbours_wait_on(
    tmp_path: Path,
) -> None:
    """One client fills a working engine (two slots) with non-streamed answers without
    max_tokens (1,500 tokens, about 9 s each, no byte until done) while four other clients'
    streams queue behind them, overdue, and are handed to the next pair: the engine sends our
    data plane no byte for 9 s. On main the stall windows took that silence for a hang (3
    windows, 4.5 s) and opened its breaker. Its counters move all along (the long answers'
    tokens): once two readings show it, its stalls count nothing and never hang; the long
    answers are served by it, and the other clients by the next pair."""
    cheap = sim_pair(CHEAP, **AS_PROFILED, max_running=2, default_max_tokens=1500)
    config = SimFleetConfig(pairs=[cheap, sim_pair(PRICEY)])
    async with run_fleet(config, answers={}) as fleet:
        urls = {q: [fleet.url(served_name(q))] for q in (CHEAP, PRICEY)}
        async with (
            data_plane(urls, tmp_path) as (url, app),
            aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=90)) as session,
        ):
            essay = chat("Write an essay about the history of the bicycle.", model=pair_of(CHEAP))
            essays = [asyncio.create_task(post(session, url, essay, 60_000)) for _ in range(2)]
            await eventually(lambda: fleet.stats(served_name(CHEAP)).received >= 2)
            body = chat("Say hello.", max_tokens=8, stream=True)
            tasks, statuses = await _clients(session, url, body, 2000, 4)
            try:
                answers = await asyncio.gather(*essays)
            finally:
                await _stop(tasks)
            for status, pair, raw in answers:
                assert (status, pair) == (200, pair_of(CHEAP)), raw[:300]
            assert opened(app, CHEAP_EP) == 0
            assert metric(app, "gearbox_circuit_state", endpoint=CHEAP_EP) == 0
            assert statuses
            assert set(statuses) == {200}, statuses
