"""A simulated engine with a page of any size: a loopback server in front of one simulated engine
that passes its chat completions through and answers `/metrics` with the engine's own page, or
(`page_bytes` > 0) with that many bytes of realistic histogram lines, streamed as they are
written, the queue gauges at the end (a misconfigured exporter, a hostile pod found by
endpoint discovery). It runs in its own process (`python -m bench.hostile.page_engine PORT
SIM_URL`); the bench switches its page with `PUT /page`. For section 7's page row
(`bench.hostile.engines`).
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp
from aiohttp import web

from bench.common.processes import free_port, running

ROOT = Path(__file__).parents[2]

LINE = b'vllm:time_to_first_token_seconds_bucket{engine="0",le="0.25",model_name="sim-int4"} 12.0\n'
PIECE = LINE * (64 * 1024 // len(LINE))
TAIL = b'vllm:num_requests_running{engine="0"} 1.0\nvllm:num_requests_waiting{engine="0"} 0.0\n'


@dataclass
class PageEngine:
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


def _app(sim_url: str, engine: PageEngine) -> web.Application:
    session: list[aiohttp.ClientSession] = []

    async def passed(request: web.Request) -> web.Response:
        async with session[0].request(
            request.method, f"{sim_url}{request.path}", data=await request.read(),
            headers={"Content-Type": request.headers.get("Content-Type", "application/json")},
        ) as answer:  # fmt: skip
            body = await answer.read()
            kind = answer.headers.get("Content-Type", "application/json")
            return web.Response(body=body, status=answer.status, headers={"Content-Type": kind})

    async def metrics(request: web.Request) -> web.StreamResponse:
        return await _huge(request, engine) if engine.page_bytes else await passed(request)

    async def page(request: web.Request) -> web.Response:
        engine.page_bytes = int(await request.text())
        return web.Response(text="ok")

    async def written(request: web.Request) -> web.Response:
        return web.Response(text=str(max(engine.written, default=0)))

    async def client(app: web.Application) -> AsyncIterator[None]:
        async with aiohttp.ClientSession() as opened:
            session.append(opened)
            yield

    app = web.Application()
    app.cleanup_ctx.append(client)
    app.router.add_get("/metrics", metrics)
    app.router.add_post("/v1/chat/completions", passed)
    app.router.add_put("/page", page)
    app.router.add_get("/written", written)
    return app


class PageControl:
    """The page server in its own process, seen from the bench: its URL, the page to serve."""

    def __init__(self, url: str, session: aiohttp.ClientSession) -> None:
        self.url, self.session = url, session

    async def serve(self, page_bytes: int) -> None:
        """Serve pages of `page_bytes` from now on (0: the engine's own)."""
        async with self.session.put(f"{self.url}/page", data=str(page_bytes)) as resp:
            resp.raise_for_status()

    async def most_written(self) -> int:
        """The most bytes of one oversized page sent before its reader left."""
        async with self.session.get(f"{self.url}/written") as resp:
            return int(await resp.text())


@contextmanager
def page_engine(sim_url: str, folder: Path) -> Iterator[str]:
    """The server in front of the simulated engine at `sim_url`, in its own process (so what
    it costs to write the pages is not charged to the data plane's loop); its URL."""
    port = free_port()
    args = [sys.executable, "-m", "bench.hostile.page_engine", str(port), sim_url]
    with running(args, folder / "page-engine.log", port=port, cwd=ROOT):
        yield f"http://127.0.0.1:{port}"


if __name__ == "__main__":
    web.run_app(
        _app(sys.argv[2], PageEngine()), host="127.0.0.1", port=int(sys.argv[1]), print=None
    )
