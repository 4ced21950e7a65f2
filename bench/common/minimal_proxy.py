"""The Python floor: the least an aiohttp proxy can do (read body, forward, relay the answer).

No parsing, routing, metrics or retries, so its throughput is the ceiling any aiohttp-based
router can reach on the same core. `python -m bench.common.minimal_proxy --port P --upstream URL
[--loop asyncio|uvloop]`: the plain asyncio loop is the baseline the targets use; on uvloop it
is a reference row (the data plane runs on uvloop by default).
"""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import AsyncIterator, Sequence

import uvloop
from aiohttp import ClientSession, ClientTimeout, TCPConnector, web

SESSION = web.AppKey("session", ClientSession)
UPSTREAM = web.AppKey("upstream", str)
_HOP = {"host", "content-length", "transfer-encoding", "connection", "keep-alive"}


async def forward(request: web.Request) -> web.StreamResponse:
    body = await request.read()
    headers = {k: v for k, v in request.headers.items() if k.lower() not in _HOP}
    url = request.app[UPSTREAM] + request.path_qs
    async with request.app[SESSION].post(url, data=body, headers=headers) as upstream:
        ctype = upstream.headers.get("Content-Type", "application/json")
        if ctype.startswith("text/event-stream"):
            response = web.StreamResponse(status=upstream.status)
            response.content_type = "text/event-stream"
            await response.prepare(request)
            try:
                async for chunk in upstream.content.iter_any():
                    await response.write(chunk)
                await response.write_eof()
            except ConnectionResetError:
                pass  # the client went away mid-stream (wrk stopping): nothing to relay to
            return response
        data = await upstream.read()
        return web.Response(status=upstream.status, body=data, content_type=ctype.split(";")[0])


def create_app(upstream: str) -> web.Application:
    app = web.Application()
    app[UPSTREAM] = upstream.rstrip("/")

    async def session_ctx(app: web.Application) -> AsyncIterator[None]:
        connector = TCPConnector(limit=1024, limit_per_host=1024)
        timeout = ClientTimeout(total=30, sock_connect=5, sock_read=30)
        async with ClientSession(connector=connector, timeout=timeout) as session:
            app[SESSION] = session
            yield

    app.cleanup_ctx.append(session_ctx)
    app.router.add_post("/{tail:.*}", forward)
    return app


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.common.minimal_proxy", description=__doc__
    )
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--upstream", required=True, help="base URL, e.g. http://127.0.0.1:8000")
    parser.add_argument(
        "--loop", choices=("asyncio", "uvloop"), default="asyncio", help="the event loop"
    )
    args = parser.parse_args(argv)
    loop = uvloop.new_event_loop() if args.loop == "uvloop" else asyncio.new_event_loop()
    web.run_app(
        create_app(args.upstream),
        host="127.0.0.1",
        port=args.port,
        access_log=None,
        print=None,
        handler_cancellation=True,
        loop=loop,
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
