"""A simulated engine with a page of any size: a loopback server in front of one simulated engine
that passes its chat completions through and answers `/metrics` with the engine's own page, or
(`page_bytes` > 0) with that many bytes of realistic histogram lines, streamed as they are
written, the queue gauges at the end (a misconfigured exporter, a hostile pod found by
endpoint discovery). For section 7's page row (`bench.hostile.engines`).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

import aiohttp
from aiohttp import web

LINE = b'vllm:time_to_first_token_seconds_bucket{engine="0",le="0.25",model_name="sim-int4"} 12.0\n'
PIECE = LINE * (64 * 1024 // len(LINE))
TAIL = b'vllm:num_requests_running{engine="0"} 1.0\nvllm:num_requests_waiting{engine="0"} 0.0\n'


@dataclass
class PageEngine:
    url: str
    page_bytes: int = 0  # 0: the engine's own page
    written: list[int] = field(default_factory=list)  # bytes of each oversized page sent


async def _huge(request: web.Request, engine: PageEngine) -> web.StreamResponse:
    resp = web.StreamResponse(headers={"Content-Type": "text/plain; version=0.0.4"})
    await resp.prepare(request)
    sent = 0
    try:
        while sent < engine.page_bytes:
            await resp.write(PIECE)
            sent += len(PIECE)
        await resp.write(TAIL)
        await resp.write_eof()
    except (ConnectionError, asyncio.CancelledError):
        pass  # the reader stopped reading: what a bounded scrape does
    finally:
        engine.written.append(sent)
    return resp


def _app(sim_url: str, session: aiohttp.ClientSession, engine: PageEngine) -> web.Application:
    async def passed(request: web.Request) -> web.Response:
        async with session.request(
            request.method, f"{sim_url}{request.path}", data=await request.read(),
            headers={"Content-Type": request.headers.get("Content-Type", "application/json")},
        ) as answer:  # fmt: skip
            body = await answer.read()
            kind = answer.headers.get("Content-Type", "application/json")
            return web.Response(body=body, status=answer.status, headers={"Content-Type": kind})

    async def metrics(request: web.Request) -> web.StreamResponse:
        return await _huge(request, engine) if engine.page_bytes else await passed(request)

    app = web.Application()
    app.router.add_get("/metrics", metrics)
    app.router.add_post("/v1/chat/completions", passed)
    return app


@asynccontextmanager
async def page_engine(sim_url: str) -> AsyncIterator[PageEngine]:
    """The server in front of the simulated engine at `sim_url`, on a free loopback port."""
    async with aiohttp.ClientSession() as session:
        engine = PageEngine("")
        runner = web.AppRunner(_app(sim_url, session, engine), handle_signals=False)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        engine.url = f"http://127.0.0.1:{runner.addresses[0][1]}"
        try:
            yield engine
        finally:
            await runner.cleanup()
