"""An aiohttp app served on a free loopback port for the length of a test (a real server)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

from aiohttp import web


@contextlib.asynccontextmanager
async def served(app: web.Application, **runner_options: Any) -> AsyncIterator[str]:
    """Serve `app` on 127.0.0.1 (a free port); yield its base URL; clean up on exit.
    `runner_options` go to `web.AppRunner` (e.g. `handler_cancellation=True`)."""
    runner = web.AppRunner(app, access_log=None, **runner_options)
    await runner.setup()
    try:
        await web.TCPSite(runner, "127.0.0.1", 0).start()
        host, port = runner.addresses[0][:2]
        yield f"http://{host}:{port}"
    finally:
        await runner.cleanup()
