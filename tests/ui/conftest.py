"""Fixtures of the operator-page tests: the example fleet published on a real stack, and a
headless chromium (fresh profile per test)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import redis.asyncio as aioredis

from contracts.redis_keys import RedisKeys
from tests.support.redis_server import RedisProcess
from tests.ui.browser import Browser, launch_browser
from tests.ui.stack import ServerFactory, Stack, example_reports, start_stack

SCREENSHOT_DIR = Path(__file__).resolve().parents[2] / "build" / "ui-screenshots"


@pytest.fixture
async def stack(
    aiohttp_server: ServerFactory,
    redis_server: RedisProcess,
    redis_client: aioredis.Redis,
    redis_keys: RedisKeys,
) -> Stack:
    """Control plane + data plane on loopback, the example fleet published as version 1."""
    return await start_stack(
        aiohttp_server, redis_server.url, redis_client, redis_keys, example_reports()
    )


@pytest.fixture
async def browser(tmp_path: Path) -> AsyncIterator[Browser]:
    async with launch_browser(tmp_path) as running:
        yield running
