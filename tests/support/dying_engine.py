"""A stand-in for issue 35's W4A16 engine: it answers /health, then dies at its first completion.

    python -m tests.support.dying_engine PORT

It logs the line vLLM's engine logged before dying on an AVX2-only CPU, then exits 1 without
answering, as a process that crashes does.
"""

from __future__ import annotations

import os
import sys

from aiohttp import web

LAST_WORDS = "AttributeError: '_OpNamespace' '_C' object has no attribute 'cpu_gemm_wna16'"


async def health(_request: web.Request) -> web.Response:
    return web.Response(text="")


async def completions(_request: web.Request) -> web.Response:
    print("Traceback (most recent call last):", flush=True)
    print(LAST_WORDS, flush=True)
    os._exit(1)


def main(port: int) -> None:
    app = web.Application()
    app.router.add_get("/health", health)
    app.router.add_post("/v1/completions", completions)
    web.run_app(app, host="127.0.0.1", port=port, print=None)


if __name__ == "__main__":
    main(int(sys.argv[1]))
