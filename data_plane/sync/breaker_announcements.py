"""Replicas eject a failing engine together: a replica whose breaker opens announces it on a
Redis channel, and every other replica skips that endpoint for the announced time
(docs/data_plane.md, "Breaker announcements").

In a Redis Cluster the channel is a classic one, which the cluster forwards to every node, so
each replica hears every announcement whichever node it subscribed on.

Announcements are best effort and bounded: the time is the opener's cooldown, capped by
`max_ttl_s`; a replica never re-announces what it heard (no echo storms); with Redis down
nothing is sent or heard and each replica still ejects on its own breakers.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
from collections.abc import Callable
from typing import Any

import redis.asyncio as aioredis
from redis.exceptions import RedisError

from contracts.redis_topology import ready_for_pubsub
from data_plane.sync.replica_identity import ReplicaIdentity

logger = logging.getLogger(__name__)
_MAX_QUEUED = 1000  # announcements waiting for Redis; beyond, new ones are dropped
_RETRY_S = 1.0


def parse_announcement(
    data: Any, is_own: Callable[[object, object], bool], max_ttl_s: float
) -> tuple[str, float] | None:
    """(endpoint, seconds to eject) from another process's message, else None (`is_own`:
    `ReplicaIdentity.is_own` of the message's instance and process)."""
    try:
        doc = json.loads(data)
        endpoint, instance, ttl = doc["endpoint"], doc["instance"], float(doc["ttl_s"])
    except (ValueError, TypeError, KeyError, AttributeError):
        return None
    if is_own(instance, doc.get("process")) or not isinstance(endpoint, str) or not endpoint:
        return None
    if not math.isfinite(ttl) or ttl <= 0:
        return None
    return endpoint, min(ttl, max_ttl_s)


class BreakerAnnouncements:
    """Sends this replica's openings and applies the others' through `eject(endpoint, s)`."""

    def __init__(
        self,
        channel: str,
        identity: ReplicaIdentity,
        eject: Callable[[str, float], None],
        max_ttl_s: float,
    ) -> None:
        self._channel, self._identity = channel, identity
        self._eject, self._max_ttl_s = eject, max_ttl_s
        self._outbox: asyncio.Queue[bytes] = asyncio.Queue(_MAX_QUEUED)
        self.heard = 0  # announcements applied (tests and logs)

    def announce(self, endpoint_id: str, cooldown_s: float) -> None:
        """Called when a breaker here opens (on the event loop; never blocks)."""
        ttl = min(cooldown_s, self._max_ttl_s)
        me = self._identity
        message = {
            "instance": me.instance_id,
            "process": me.process,
            "endpoint": endpoint_id,
            "ttl_s": ttl,
        }
        try:
            self._outbox.put_nowait(json.dumps(message).encode())
        except asyncio.QueueFull:
            logger.debug("breaker announcement dropped: outbox full")

    async def send_forever(self, client: aioredis.Redis) -> None:
        while True:
            message = await self._outbox.get()
            try:
                await client.publish(self._channel, message)
            except (RedisError, OSError) as err:
                logger.debug("breaker announcement not sent: %s", err)

    async def listen_forever(self, client: aioredis.Redis) -> None:
        """Subscribe and apply; resubscribe after Redis errors."""
        while True:
            try:
                await self._listen(client)
            except (RedisError, OSError) as err:
                logger.debug("breaker announcements unavailable: %s", err)
                await asyncio.sleep(_RETRY_S)

    async def _listen(self, client: aioredis.Redis) -> None:
        await ready_for_pubsub(client)
        async with client.pubsub(ignore_subscribe_messages=True) as pubsub:
            await pubsub.subscribe(self._channel)
            while True:
                message = await pubsub.get_message(timeout=1.0)
                if message is not None:
                    self._apply(message.get("data"))

    def _apply(self, data: Any) -> None:
        heard = parse_announcement(data, self._identity.is_own, self._max_ttl_s)
        if heard is None:
            return
        self._eject(*heard)
        self.heard += 1
        logger.info(
            "endpoint ejected for %.1f s: a replica's breaker opened",
            heard[1],
            extra={"endpoint": heard[0]},
        )
