"""Stopping a data plane always finishes: no background task may outlive a cancel.

On Python 3.11 a cancel can be swallowed inside redis-py (its writes use `asyncio.wait_for`,
which returns the result instead of raising when the cancel lands as the write completes,
CPython gh-86296). Shutdown must not depend on a single cancel being delivered.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from aiohttp import web

from contracts.redis_keys import RedisKeys
from data_plane.app import AppDeps, create_app
from tests.reliability.stack import dp_settings
from tests.support.redis_server import RedisProcess

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("uptime_s", [0.0, 0.3])
async def test_data_plane_stops_promptly_even_right_after_start(
    uptime_s: float, redis_server: RedisProcess, redis_keys: RedisKeys, tmp_path: Path
) -> None:
    for round_ in range(3):
        settings = dp_settings(redis_server.url, redis_keys.prefix, tmp_path / f"s{round_}.json")
        runner = web.AppRunner(create_app(settings, AppDeps()))
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", 0).start()
        await asyncio.sleep(uptime_s)
        cleanup = asyncio.ensure_future(runner.cleanup())
        done, _ = await asyncio.wait([cleanup], timeout=10)
        leftovers = [t for t in asyncio.all_tasks() if t.get_name().startswith("gearbox-")]
        for task in leftovers:  # end them, so a failure here does not hang the session
            while not task.done():
                task.cancel()
                await asyncio.sleep(0.01)
        await asyncio.wait([cleanup], timeout=5)
        assert done, f"shutdown hung in round {round_}; still running: {leftovers}"
