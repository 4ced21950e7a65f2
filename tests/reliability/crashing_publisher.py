"""A control-plane publisher process that dies (SIGKILL) right after it wrote a new table
version and before it moved the `current` pointer: the worst moment to crash.

`python -m tests.reliability.crashing_publisher REDIS_URL PREFIX TABLE_JSON`. The crash is
injected through the publisher's constructor (its Redis client): the transaction that moves
the pointer starts with MULTI, and this client's pipelines kill the process there.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from pathlib import Path

import redis.asyncio as aioredis
from redis.asyncio.client import Pipeline

from contracts.redis_keys import RedisKeys
from contracts.routing_table import RoutingTable
from control_plane.settings import PublisherOptions
from control_plane.store.publisher import Publisher

LOCK_TTL_S = 1.0  # the lock a crashed publisher leaves behind expires after this


class _CrashAtMulti(Pipeline):
    def multi(self) -> None:
        os.kill(os.getpid(), signal.SIGKILL)


class CrashingRedis(aioredis.Redis):
    """A real client whose transactions die at MULTI (after WATCH, GET, INCR and SET NX)."""

    def pipeline(self, transaction: bool = True, shard_hint: str | None = None) -> Pipeline:
        return _CrashAtMulti(self.connection_pool, self.response_callbacks, transaction, shard_hint)


async def publish_and_crash(url: str, prefix: str, table: RoutingTable) -> None:
    client = CrashingRedis.from_url(url)
    publisher = Publisher(client, RedisKeys(prefix), PublisherOptions(lock_ttl_s=LOCK_TTL_S))
    await publisher.publish(table)
    raise SystemExit("the publisher was expected to die before returning")


def main() -> None:
    url, prefix, table_path = sys.argv[1:4]
    table = RoutingTable.model_validate_json(Path(table_path).read_bytes())
    asyncio.run(publish_and_crash(url, prefix, table))


if __name__ == "__main__":
    main()
