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

# Units of work that run one module after another on one worker under `--dist loadgroup`,
# scheduled first so the longest units do not start last. `heavy`: modules that take the
# machine's CPUs or memory for a while (real vLLM, the whole demo on simulated engines,
# chromium). `latency`: modules whose assertions ride on latencies measured from simulated
# engines (refits, stall and blame verdicts), kept from measuring beside one another.
GROUPS = {
    "tests/e2e/test_real_engine.py": "heavy",
    "tests/e2e/test_demo_sim.py": "heavy",
    "tests/ui/": "heavy",
    "tests/hostile/": "latency",
    "tests/integration/data_plane/test_refit.py": "latency",
}


def _unit_of_work(item: pytest.Item) -> str:
    path = item.nodeid.split("::", 1)[0]
    return next((g for prefix, g in GROUPS.items() if path.startswith(prefix)), path)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """With `--dist loadgroup` (`make test`) a module is one unit of work, as with
    `--dist loadfile` (its module fixtures are built once, on one worker), and each of
    `GROUPS` is one, scheduled first. Other runs keep their order and node ids."""
    if config.getoption("dist", "no") != "loadgroup":
        return
    for item in items:
        if item.get_closest_marker("xdist_group") is None:
            item.add_marker(pytest.mark.xdist_group(_unit_of_work(item)))
    first = set(GROUPS.values())
    items.sort(key=lambda item: _unit_of_work(item) not in first)  # stable: order kept within


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
