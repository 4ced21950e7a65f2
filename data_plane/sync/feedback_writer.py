"""Adds this replica's latency feedback to the Redis stream at an interval.

One XADD per table version per interval, with the stream capped (MAXLEN), so Redis holds a
bounded window whatever the traffic. Failures drop that window's summary (counted at DEBUG):
feedback is advisory and never on the request path.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

import redis.asyncio as aioredis
from redis.exceptions import RedisError

from contracts.redis_keys import RedisKeys
from data_plane.telemetry.feedback import FeedbackAggregator

logger = logging.getLogger(__name__)
STREAM_MAXLEN = 10_000  # summaries kept, all replicas together


class FeedbackWriter:
    def __init__(
        self,
        client: aioredis.Redis,
        keys: RedisKeys,
        instance: str,
        aggregator: FeedbackAggregator,
        wall_clock: Callable[[], float],
        maxlen: int = STREAM_MAXLEN,
    ) -> None:
        self._client = client
        self._maxlen = maxlen
        self._key = keys.feedback
        self._instance = instance
        self._aggregator = aggregator
        self._wall_clock = wall_clock
        self.written = 0
        self.failures = 0

    async def write_once(self) -> int:
        """Drain the window and add its summaries; returns how many Redis took."""
        reports = self._aggregator.drain(self._instance, self._wall_clock())
        written = 0
        for report in reports:
            try:
                await self._client.xadd(
                    self._key,
                    {"report": report.model_dump_json()},
                    maxlen=self._maxlen,
                    approximate=False,  # exact: one trim per summary costs nothing
                )
            except (RedisError, OSError) as err:
                self.failures += 1
                logger.debug("feedback not written: %s", type(err).__name__)
                continue
            written += 1
        self.written += written
        return written

    async def run(self, interval_s: float) -> None:
        while True:
            await asyncio.sleep(interval_s)
            await self.write_once()
