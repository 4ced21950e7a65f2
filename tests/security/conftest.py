"""One hostile-input target for the whole security suite: the stack on a password-protected
Redis, served from a background thread (see live.py)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

# The reliability suite's fixtures (live planes on loopback, child processes) serve here too.
from tests.reliability.conftest import (  # noqa: F401
    children,
    publisher,
    snapshot,
    start_control_plane,
    start_data_plane,
)
from tests.security.live import LiveStack, ThreadedStack
from tests.support.redis_server import RedisProcess, running_redis

REDIS_PASSWORD = "security-suite-redis-password-7f3a9c"


@pytest.fixture(scope="session")
def secure_redis() -> Iterator[RedisProcess]:
    """A real redis-server that refuses clients without the password."""
    with running_redis(password=REDIS_PASSWORD) as proc:
        yield proc


@pytest.fixture(scope="session")
def stack(
    secure_redis: RedisProcess, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[LiveStack]:
    threaded = ThreadedStack(secure_redis.url, "sec", tmp_path_factory.mktemp("stack"))
    live = threaded.start()
    live.secrets = (*live.secrets, REDIS_PASSWORD)
    try:
        yield live
    finally:
        threaded.stop()
