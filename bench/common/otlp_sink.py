"""A trace collector that accepts and drops OTLP/HTTP exports, so the data plane under test
runs with tracing on (batch span processor and exporter included) without a real collector.
`python -m bench.common.otlp_sink --port P`."""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from aiohttp import web

RECEIVED = web.AppKey("received", list[int])


async def accept(request: web.Request) -> web.Response:
    body = await request.read()
    request.app[RECEIVED].append(len(body))
    # An empty ExportTraceServiceResponse is zero protobuf bytes.
    return web.Response(body=b"", content_type="application/x-protobuf")


async def stats(request: web.Request) -> web.Response:
    sizes = request.app[RECEIVED]
    return web.json_response({"exports": len(sizes), "bytes": sum(sizes)})


def create_app() -> web.Application:
    app = web.Application(client_max_size=64 * 1024 * 1024)
    app[RECEIVED] = []
    app.router.add_post("/v1/traces", accept)
    app.router.add_get("/stats", stats)
    return app


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.common.otlp_sink", description=__doc__)
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args(argv)
    web.run_app(create_app(), host="127.0.0.1", port=args.port, access_log=None, print=None)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
