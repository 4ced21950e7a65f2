"""The engine scrape against a real /metrics server, with both kinds of engine client: depths
reach the load tracker, a round's scrapes are spread over the interval instead of going out in
one burst, and an engine that fails, answers non-200, stalls or serves a page past the limit
leaves its last depth alone."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from data_plane.domain import CompiledEndpoint
from data_plane.resilience.endpoint_load import LoadTracker
from data_plane.sync.engine_scrape import EngineScraper, ScrapeTarget
from data_plane.sync.metrics_page import PageRefusals
from data_plane.upstream.http1 import Http1Upstream
from data_plane.upstream.port import AiohttpUpstream, SessionLimits
from tests.support.waiting import eventually

LIMITS = SessionLimits(
    connector_limit=100,
    connector_limit_per_host=0,
    connect_timeout_s=2.0,
    read_timeout_s=2.0,
    total_timeout_s=2.0,
)

ServerFactory = Callable[[web.Application], Awaitable[TestServer]]
PAGE = (
    "# TYPE vllm:num_requests_waiting gauge\n"
    'vllm:num_requests_waiting{{model_name="m"}} {waiting}\n'
    "# TYPE vllm:num_requests_running gauge\n"
    'vllm:num_requests_running{{model_name="m"}} 1\n'
)


async def _metrics_server(
    aiohttp_server: ServerFactory,
    handler: Callable[[web.Request], Awaitable[web.StreamResponse]],
) -> str:
    """A loopback server answering GET /{engine}/metrics with `handler`; its base URL."""
    app = web.Application()
    app.router.add_get("/{engine}/metrics", handler)
    server = await aiohttp_server(app)
    return str(server.make_url("")).rstrip("/")


@pytest.fixture(params=["http1", "aiohttp"])
async def client(request: pytest.FixtureRequest) -> AsyncIterator[Http1Upstream | AiohttpUpstream]:
    """The engine client kinds the data plane scrapes with (settings.upstream_client)."""
    made: Http1Upstream | AiohttpUpstream = (
        Http1Upstream(LIMITS, AiohttpUpstream(LIMITS))
        if request.param == "http1"
        else AiohttpUpstream(LIMITS)
    )
    made.open()
    yield made
    await made.close()


async def test_scrapes_reach_the_tracker_spread_over_the_interval(
    aiohttp_server: ServerFactory, client: Http1Upstream | AiohttpUpstream
) -> None:
    loop = asyncio.get_running_loop()
    arrivals: dict[str, float] = {}

    async def metrics(request: web.Request) -> web.Response:
        engine = request.match_info["engine"]
        arrivals[engine] = loop.time()
        return web.Response(text=PAGE.format(waiting=int(engine)))

    base = await _metrics_server(aiohttp_server, metrics)
    targets = [ScrapeTarget(CompiledEndpoint(f"e{i}", f"{base}/{i}"), "m") for i in range(4)]
    tracker = LoadTracker()
    depths: dict[str, float] = {}
    scraper = EngineScraper(client, lambda: targets, tracker, depths.__setitem__, 2.0)
    assert await scraper.scrape_once() == 4  # all at once (spread 0)
    assert depths == {"e0": 1.0, "e1": 2.0, "e2": 3.0, "e3": 4.0}
    assert dict(tracker.load) == depths
    arrivals.clear()
    started = loop.time()
    assert await scraper.scrape_once(spread_s=0.4) == 4
    offsets = [arrivals[str(i)] - started for i in range(4)]
    # Scrape i starts no earlier than i x 0.1 s into the round, not in one burst: a lower bound
    # a loaded machine cannot break (a gap check between arrivals failed at load 12, when one
    # arrival waited on the loop and the next did not).
    assert all(offset >= i * 0.1 - 0.001 for i, offset in enumerate(offsets)), offsets
    assert offsets[-1] < 1.0


async def test_failed_scrapes_keep_the_last_depth(
    aiohttp_server: ServerFactory, client: Http1Upstream | AiohttpUpstream
) -> None:
    """A GET that is refused, answered 500, or stalls past the timeout counts as no answer;
    the depth scraped before stays (a flaky engine never blanks its load)."""
    mode = {"e0": "ok", "e1": "ok", "e2": "ok"}
    stalled = asyncio.Event()

    async def metrics(request: web.Request) -> web.Response:
        engine = request.match_info["engine"]
        assert request.method == "GET"
        if mode[engine] == "500":
            return web.Response(status=500, text="no")
        if mode[engine] == "stall":
            await stalled.wait()
        return web.Response(text=PAGE.format(waiting=3))

    base = await _metrics_server(aiohttp_server, metrics)
    names = ["e0", "e1", "e2"]
    targets = [ScrapeTarget(CompiledEndpoint(n, f"{base}/{n}"), "m") for n in names]
    targets.append(ScrapeTarget(CompiledEndpoint("gone", "http://127.0.0.1:9"), "m"))
    tracker = LoadTracker()
    depths: dict[str, float] = {}
    # A 2 s timeout: the stalled GET waits it out once, and the healthy ones meet it even at
    # load 10 (0.3 s did not: three pages on a loaded 6-worker suite missed it once).
    scraper = EngineScraper(client, lambda: targets, tracker, depths.__setitem__, 2.0)
    assert await scraper.scrape_once() == 3
    assert depths == {"e0": 4.0, "e1": 4.0, "e2": 4.0}
    mode.update(e1="500", e2="stall")
    assert await scraper.scrape_once() == 1  # e0 only; e1 500, e2 timed out, gone refused
    stalled.set()
    assert dict(tracker.load) == {"e0": 4.0, "e1": 4.0, "e2": 4.0}


async def test_a_spread_round_starts_each_scrape_in_its_turn_and_cancels_whole(
    aiohttp_server: ServerFactory, client: Http1Upstream | AiohttpUpstream
) -> None:
    """The round's start is one task, not one per endpoint waiting its turn; cancelling the
    round cancels the scrapes under way (none left behind)."""
    first_arrived, release, handled = asyncio.Event(), asyncio.Event(), asyncio.Event()

    async def metrics(request: web.Request) -> web.Response:
        first_arrived.set()
        try:
            await release.wait()
        finally:
            handled.set()
        return web.Response(text=PAGE.format(waiting=1))

    base = await _metrics_server(aiohttp_server, metrics)
    targets = [ScrapeTarget(CompiledEndpoint(f"e{i}", f"{base}/{i}"), "m") for i in range(4)]
    scraper = EngineScraper(client, lambda: targets, LoadTracker(), lambda _e, _d: None, 5.0)
    before = asyncio.all_tasks()
    round_ = asyncio.create_task(scraper.scrape_once(spread_s=4.0))
    await asyncio.wait_for(first_arrived.wait(), 2.0)
    scrapes = [
        t
        for t in asyncio.all_tasks() - before - {round_}
        if t.get_coro().__qualname__ == "EngineScraper._scrape"  # type: ignore[union-attr]
    ]
    assert len(scrapes) == 1  # the first scrape only; the other three not yet created
    round_.cancel()
    with pytest.raises(asyncio.CancelledError):
        await round_
    assert all(t.done() for t in scrapes)
    release.set()  # the server's handler ends before the server is torn down
    await asyncio.wait_for(handled.wait(), 2.0)


async def test_a_page_past_the_limit_is_a_counted_refusal_that_keeps_the_last_depth(
    aiohttp_server: ServerFactory, client: Http1Upstream | AiohttpUpstream
) -> None:
    """With either client kind: a page over `max_page_bytes` (its queue lines at its end, so
    reading it whole would find them) is refused, counted once per scrape, and the depth
    scraped before stays; the server saw the reader leave long before the page's end."""
    huge = {"on": False}
    written: list[int] = []
    filler = b"# HELP vllm:other_metric " + b"x" * 1000 + b"\n"

    async def metrics(request: web.Request) -> web.StreamResponse:
        if not huge["on"]:
            return web.Response(text=PAGE.format(waiting=2))
        resp = web.StreamResponse()
        await resp.prepare(request)
        sent = 0
        try:
            while sent < 64 * 1024 * 1024:
                await resp.write(filler * 64)
                sent += len(filler) * 64
            await resp.write(PAGE.format(waiting=9).encode())
        except ConnectionError:
            pass  # the reader left: what a bounded scrape does
        finally:
            written.append(sent)  # also when the server cancels the handler as the peer goes
        return resp

    base = await _metrics_server(aiohttp_server, metrics)
    targets = [ScrapeTarget(CompiledEndpoint("e0", f"{base}/0"), "m")]
    tracker, refused = LoadTracker(), list[str]()
    scraper = EngineScraper(
        client, lambda: targets, tracker, lambda _e, _d: None, 5.0, 256 * 1024,
        PageRefusals(refused.append),
    )  # fmt: skip
    assert await scraper.scrape_once() == 1
    huge["on"] = True
    assert await scraper.scrape_once() == 0
    assert await scraper.scrape_once() == 0
    assert refused == ["too_large", "too_large"]
    assert dict(tracker.load) == {"e0": 3.0}
    await eventually(lambda: len(written) == 2, what="the server saw both readers leave")
    assert max(written) < 16 * 1024 * 1024


async def test_the_routers_own_items_in_an_engines_queue_are_not_its_load(
    aiohttp_server: ServerFactory, client: Http1Upstream | AiohttpUpstream
) -> None:
    """Two canary items at the engine (`LoadTracker.background`: in no load) and one client
    request in flight: a scraped queue of 4 is 1 request of someone else's, so the load is the
    client's 1 plus that 1; on 44a6f81 the items counted as others' load (3). Once they leave,
    the next scrape counts what is there again."""

    async def metrics(request: web.Request) -> web.Response:
        return web.Response(text=PAGE.format(waiting=3))

    base = await _metrics_server(aiohttp_server, metrics)
    targets = [ScrapeTarget(CompiledEndpoint("e0", f"{base}/0"), "m")]
    tracker = LoadTracker()
    scraper = EngineScraper(client, lambda: targets, tracker, lambda _e, _d: None, 2.0)
    tracker.acquire("e0")
    with tracker.background("e0"), tracker.background("e0"):
        assert tracker.load.get("e0") == 1.0  # the items are in no load
        assert tracker.own_at("e0") == 3
        assert await scraper.scrape_once() == 1
        assert tracker.load["e0"] == 2.0
    assert tracker.own_at("e0") == 1
    assert await scraper.scrape_once() == 1
    assert tracker.load["e0"] == 4.0
    tracker.release("e0")
