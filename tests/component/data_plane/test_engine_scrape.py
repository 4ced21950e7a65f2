"""The engine scrape against a real /metrics server: depths reach the load tracker, and a
round's scrapes are spread over the interval instead of going out in one burst."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from itertools import pairwise

import aiohttp
from aiohttp import web
from aiohttp.test_utils import TestServer

from data_plane.domain import CompiledEndpoint
from data_plane.resilience.endpoint_load import LoadTracker
from data_plane.sync.engine_scrape import EngineScraper, ScrapeTarget

ServerFactory = Callable[[web.Application], Awaitable[TestServer]]
PAGE = (
    "# TYPE vllm:num_requests_waiting gauge\n"
    'vllm:num_requests_waiting{{model_name="m"}} {waiting}\n'
    "# TYPE vllm:num_requests_running gauge\n"
    'vllm:num_requests_running{{model_name="m"}} 1\n'
)


async def test_scrapes_reach_the_tracker_spread_over_the_interval(
    aiohttp_server: ServerFactory,
) -> None:
    loop = asyncio.get_running_loop()
    arrivals: dict[str, float] = {}

    async def metrics(request: web.Request) -> web.Response:
        engine = request.match_info["engine"]
        arrivals[engine] = loop.time()
        return web.Response(text=PAGE.format(waiting=int(engine)))

    app = web.Application()
    app.router.add_get("/{engine}/metrics", metrics)
    server = await aiohttp_server(app)
    base = str(server.make_url("")).rstrip("/")
    targets = [ScrapeTarget(CompiledEndpoint(f"e{i}", f"{base}/{i}"), "m") for i in range(4)]
    tracker = LoadTracker()
    depths: dict[str, float] = {}
    async with aiohttp.ClientSession() as session:
        scraper = EngineScraper(session, lambda: targets, tracker, depths.__setitem__, 2.0)
        assert await scraper.scrape_once() == 4  # all at once (spread 0)
        assert depths == {"e0": 1.0, "e1": 2.0, "e2": 3.0, "e3": 4.0}
        assert dict(tracker.load) == depths
        arrivals.clear()
        started = loop.time()
        assert await scraper.scrape_once(spread_s=0.4) == 4
    offsets = sorted(t - started for t in arrivals.values())
    assert len(offsets) == 4
    gaps = [b - a for a, b in pairwise(offsets)]
    assert all(gap >= 0.05 for gap in gaps), offsets  # ~0.1 s apart, not one burst
    assert offsets[-1] < 1.0
