"""Session fixtures: one real redis-server per test session (fails, never skips, if absent),
and how `make test` spreads the suite over pytest-xdist workers (docs/style.md, "Tests")."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from itertools import count

import pytest
import redis.asyncio as aioredis

from contracts.redis_keys import RedisKeys
from tests.support.redis_server import RedisProcess, running_redis

_prefixes = count()

# Modules that take a machine's CPUs or memory for a while: real vLLM, the whole demo on
# simulated engines, chromium. Under `--dist loadgroup` they run one after another on one
# worker, and first, so the longest unit of work does not start last.
HEAVY = ("tests/e2e/test_real_engine.py", "tests/e2e/test_demo_sim.py", "tests/ui/")


def _unit_of_work(item: pytest.Item) -> str:
    path = item.nodeid.split("::", 1)[0]
    return "heavy" if path.startswith(HEAVY) else path


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """With `--dist loadgroup` (`make test`) a module is one unit of work, as with
    `--dist loadfile` (its module fixtures are built once, on one worker), and the heavy
    modules together are one, scheduled first. Other runs keep their order and nodeids."""
    if config.getoption("dist", "no") != "loadgroup":
        return
    for item in items:
        if item.get_closest_marker("xdist_group") is None:
            item.add_marker(pytest.mark.xdist_group(_unit_of_work(item)))
    items.sort(key=lambda item: _unit_of_work(item) != "heavy")  # stable: order kept within


@pytest.fixture(scope="session")
def redis_server() -> Iterator[RedisProcess]:
    """A real redis-server on a free loopback port for the whole session."""
    with running_redis() as proc:
        yield proc


@pytest.fixture
def redis_keys() -> RedisKeys:
    """A fresh key prefix per test, so tests share the server but never each other's keys."""
    return RedisKeys(prefix=f"t{next(_prefixes)}")


@pytest.fixture
async def redis_client(redis_server: RedisProcess) -> AsyncIterator[aioredis.Redis]:
    client = aioredis.Redis.from_url(redis_server.url, decode_responses=False)
    try:
        yield client
    finally:
        await client.aclose()
