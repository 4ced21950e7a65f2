"""`python -m bench.uvloop_launch serve`: the data plane's own CLI, on uvloop's event loop.

Bench-only: measures what uvloop would give the data plane without changing its code. The
policy is set before `data_plane.__main__.main` creates its loop through aiohttp's run_app.
"""

from __future__ import annotations

import asyncio
import sys

import uvloop

from data_plane.__main__ import main

if __name__ == "__main__":
    asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
    raise SystemExit(main(sys.argv[1:]))
