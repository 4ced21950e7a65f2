"""An engine's `/metrics` page cannot stall the router (docs/data_plane.md, "Engine pages";
`data_plane/sync/metrics_page.py`).

Each engine here is a simulated one behind a loopback aiohttp server that passes its chat
completions through and answers `/metrics` with a page of the given size (a misconfigured
exporter, a hostile pod found by endpoint discovery): realistic histogram lines, streamed as
they are written (nothing holds the page), with the queue gauges at its end. The data plane
scrapes every engine twice a second while closed-loop clients are served. On 95376ca the
scrape read a 48 MiB page whole, decoded it and split it on the event loop: the loop stalled
250-415 ms per scrape (lag p99 255 ms here) and 1 GiB pages were read to 71 MiB each. Now
the page is refused once past the page limit (4 MiB; about 7.6 MiB left the server with what
the sockets buffer), counted and logged, and the loop's lag p99 stays under 20 ms (1-3 ms
measured, as with a 64 KiB page).
"""

from __future__ import annotations

import asyncio
import logging
import statistics
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web

from data_plane.domain import CompiledEndpoint
from data_plane.progress.engine_probe import EngineProbe
from data_plane.progress.stillness import Unread
from data_plane.sync.engine_scrape import ScrapeTarget
from data_plane.sync.metrics_page import PageRefusals
from data_plane.upstream.http1 import Http1Upstream
from data_plane.upstream.port import AiohttpUpstream, SessionLimits
from simulator import SimFleetConfig, run_fleet
from tests.hostile.test_engine_blame import chat, data_plane, post
from tests.reliability.stack import CHEAP, PRICEY, metric, served_name, sim_pair
from tests.support.waiting import eventually

pytestmark = pytest.mark.integration

MiB = 1024 * 1024
LINE = (
    b'vllm:time_to_first_token_seconds_bucket{engine="0",le="0.25",'
    b'model_name="llama-3.1-70b-instruct-awq-int4"} 12.0\n'
)
PIECE = LINE * (64 * 1024 // len(LINE))
TAIL = b'vllm:num_requests_running{engine="0"} 1.0\nvllm:num_requests_waiting{engine="0"} 0.0\n'
LAG_TICK_S = 0.005


@asynccontextmanager
async def hostile_engine(sim_url: str, page_bytes: int) -> AsyncIterator[tuple[str, list[int]]]:
    """A loopback server in front of the simulated engine at `sim_url`: chat passes through,
    `/metrics` is a page of `page_bytes`; its URL and the bytes each page got written."""
    written: list[int] = []

    async def metrics(request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "text/plain; version=0.0.4"})
        await resp.prepare(request)
        sent = 0
        try:
            while sent < page_bytes:
                await resp.write(PIECE)
                sent += len(PIECE)
            await resp.write(TAIL)
            await resp.write_eof()
        except (ConnectionError, asyncio.CancelledError):
            pass  # the reader stopped reading: what a bounded scrape does
        finally:
            written.append(sent)
        return resp

    async def passed(request: web.Request) -> web.Response:
        async with session.post(
            f"{sim_url}{request.path}",
            data=await request.read(),
            headers={"Content-Type": "application/json"},
        ) as answer:
            body = await answer.read()
            return web.Response(body=body, status=answer.status, content_type="application/json")

    app = web.Application()
    app.router.add_get("/metrics", metrics)
    app.router.add_post("/v1/chat/completions", passed)
    runner = web.AppRunner(app, handle_signals=False)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    async with aiohttp.ClientSession() as session:
        await site.start()
        port = runner.addresses[0][1]
        try:
            yield f"http://127.0.0.1:{port}", written
        finally:
            await runner.cleanup()


async def _lag_ms(stop: asyncio.Event, lags: list[float]) -> None:
    """How late each `LAG_TICK_S` sleep wakes (the event loop's lag), in ms of this thread's
    CPU time, until `stop`: what the loop was busy with past the tick, without the time the
    machine (two cores shared by the test suite) gave the process no core at all."""
    loop = asyncio.get_running_loop()
    while not stop.is_set():
        asked, cpu = loop.time(), time.thread_time()
        await asyncio.sleep(LAG_TICK_S)
        late_s = loop.time() - asked - LAG_TICK_S
        lags.append(max(0.0, min(late_s, time.thread_time() - cpu - LAG_TICK_S)) * 1000)


@pytest.mark.parametrize("page_bytes", [48 * MiB, 1024 * MiB], ids=["48MiB", "1GiB"])
async def test_a_huge_metrics_page_never_stalls_the_loop(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, page_bytes: int
) -> None:
    config = SimFleetConfig(pairs=[sim_pair(CHEAP), sim_pair(PRICEY)])
    async with (
        run_fleet(config, answers={}) as fleet,
        hostile_engine(fleet.url(served_name(CHEAP)), page_bytes) as (cheap_url, cheap_pages),
        hostile_engine(fleet.url(served_name(PRICEY)), page_bytes) as (pricey_url, _),
    ):
        urls = {CHEAP: [cheap_url], PRICEY: [pricey_url]}
        async with (
            data_plane(urls, tmp_path, scrape_interval_s=0.5, scrape_timeout_s=2.0) as plane,
            aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as session,
        ):
            url, app = plane
            statuses: list[int] = []
            stop, lags = asyncio.Event(), list[float]()

            async def client() -> None:
                while not stop.is_set():
                    status, _, _ = await post(session, url, chat("Say hello.", max_tokens=8))
                    statuses.append(status)

            with caplog.at_level(logging.WARNING, logger="data_plane"):
                tasks = [asyncio.create_task(client()) for _ in range(4)]
                lagging = asyncio.create_task(_lag_ms(stop, lags))
                three_rounds = lambda: len(cheap_pages) >= 6  # noqa: E731
                await eventually(three_rounds, timeout_s=30.0, what="six scrapes of the page")
                stop.set()
                await asyncio.gather(*tasks, lagging)
            refused = metric(app, "gearbox_engine_scrape_errors_total", reason="too_large")
    p99 = statistics.quantiles(lags, n=100)[98]
    assert p99 < 20.0, f"loop lag p99 {p99:.1f} ms over {len(lags)} ticks"
    assert statuses
    assert set(statuses) == {200}
    assert refused >= 6
    # Each page was left after the limit (4 MiB) and what the sockets buffer: never read whole.
    assert max(cheap_pages) < 16 * MiB
    logged = [r for r in caplog.records if "page refused" in r.getMessage()]
    assert len(logged) == 2  # once per endpoint, the refusals after are only counted


async def test_the_stall_probe_reads_a_huge_page_as_no_series() -> None:
    """The stall guard's counter read refuses the page as the scrape does: `NO_SERIES` (no
    hang evidence either way), counted, the 1 GiB page left after the limit."""
    refusals: list[str] = []
    limits = SessionLimits(100, 0, 2.0, 2.0, 2.0)
    client = Http1Upstream(limits, AiohttpUpstream(limits))
    client.open()
    try:
        async with hostile_engine("http://127.0.0.1:9", 1024 * MiB) as (url, pages):
            target = ScrapeTarget(CompiledEndpoint("e#0", url), "m")
            probe = EngineProbe(
                client, {"e#0": target}.get, 2.0, 4 * MiB, PageRefusals(refusals.append)
            )
            assert await probe.read("e#0") is Unread.NO_SERIES
            await eventually(lambda: len(pages) == 1, what="the server saw the reader go")
    finally:
        await client.close()
    assert refusals == ["too_large"]
    assert pages[0] < 16 * MiB
