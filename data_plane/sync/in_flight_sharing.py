"""Replicas share their in-flight counts per endpoint, so load between scrapes is not herded
(docs/data_plane.md, "In-flight sharing").

Every `interval_s` a replica publishes on a Redis channel one message with its own in-flight
count per endpoint (the whole snapshot: an endpoint it does not name has none of its
requests). Each replica keeps the latest snapshot of every other replica for at most `ttl_s`
after it arrived, and hands the sum per endpoint to the load tracker, which merges it with the
scraped queue depth without double counting. No Redis I/O on the request path: publishing and
listening are two background loops. With Redis down nothing is heard, snapshots expire, and
each replica falls back to its own in-flight plus the scrape.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
from collections.abc import Callable, Mapping
from typing import Any

import redis.asyncio as aioredis
from redis.exceptions import RedisError

from data_plane.sync.replica_identity import ReplicaIdentity

logger = logging.getLogger(__name__)
_RETRY_S = 1.0


def encode_snapshot(instance: str, process: str, in_flight: Mapping[str, int]) -> bytes:
    """This replica's message: its non-zero in-flight counts per endpoint."""
    counts = {e: n for e, n in in_flight.items() if n > 0}
    return json.dumps({"instance": instance, "process": process, "in_flight": counts}).encode()


def parse_snapshot(
    data: Any, is_own: Callable[[object, object], bool]
) -> tuple[str, dict[str, float]] | None:
    """(sender, counts) from another process's message; None for our own or a bad one. The
    sender is the instance id and the process token: two processes with one id (a clash,
    `ReplicaIdentity.is_own`) are still two replicas."""
    try:
        doc = json.loads(data)
        instance, counts = doc["instance"], doc["in_flight"]
        process = doc.get("process")
    except (ValueError, TypeError, KeyError, AttributeError):
        return None
    if not isinstance(instance, str) or not isinstance(counts, dict):
        return None
    if is_own(instance, process):
        return None
    parsed: dict[str, float] = {}
    for endpoint, value in counts.items():
        if isinstance(value, bool) or not isinstance(value, int | float):
            return None
        if math.isfinite(value) and value > 0:
            parsed[str(endpoint)] = float(value)
    return f"{instance}\x1f{process}" if process is not None else instance, parsed


def sum_fresh(
    latest: Mapping[str, tuple[float, Mapping[str, float]]], now: float, ttl_s: float
) -> dict[str, float]:
    """Per endpoint, the sum over replicas whose snapshot arrived within `ttl_s` (PURE)."""
    total: dict[str, float] = {}
    for received_at, counts in latest.values():
        if now - received_at > ttl_s:
            continue
        for endpoint, n in counts.items():
            total[endpoint] = total.get(endpoint, 0.0) + n
    return total


class InFlightSharing:
    """Publishes `own()` every interval; applies the others' fresh sum through `on_peers`."""

    def __init__(
        self,
        channel: str,
        identity: ReplicaIdentity,
        own: Callable[[], Mapping[str, int]],
        on_peers: Callable[[Mapping[str, float]], None],
        ttl_s: float,
        clock: Callable[[], float],
    ) -> None:
        self._channel, self._identity = channel, identity
        self._own, self._on_peers = own, on_peers
        self._ttl_s, self._clock = ttl_s, clock
        self._latest: dict[str, tuple[float, dict[str, float]]] = {}
        self.heard = 0  # snapshots applied (tests and logs)

    async def publish_forever(self, client: aioredis.Redis, interval_s: float) -> None:
        while True:
            try:
                me = self._identity
                message = encode_snapshot(me.instance_id, me.process, self._own())
                await client.publish(self._channel, message)
            except (RedisError, OSError) as err:
                logger.debug("in-flight snapshot not sent: %s", err)
            await asyncio.sleep(interval_s)

    async def listen_forever(self, client: aioredis.Redis, interval_s: float) -> None:
        """Subscribe and apply; resubscribe after Redis errors (snapshots expire meanwhile)."""
        while True:
            try:
                await self._listen(client, interval_s)
            except (RedisError, OSError) as err:
                logger.debug("in-flight sharing unavailable: %s", err)
                self.expire()
                await asyncio.sleep(_RETRY_S)

    def receive(self, data: Any) -> None:
        """Apply one message (the listener calls this; tests may too)."""
        heard = parse_snapshot(data, self._identity.is_own)
        if heard is None:
            return
        self._latest[heard[0]] = (self._clock(), heard[1])
        self.heard += 1
        self.expire()

    def expire(self) -> None:
        """Drop stale snapshots and hand the fresh sum to the tracker."""
        now = self._clock()
        for instance in [i for i, (t, _) in self._latest.items() if now - t > self._ttl_s]:
            del self._latest[instance]
        self._on_peers(sum_fresh(self._latest, now, self._ttl_s))

    async def _listen(self, client: aioredis.Redis, interval_s: float) -> None:
        async with client.pubsub(ignore_subscribe_messages=True) as pubsub:
            await pubsub.subscribe(self._channel)
            while True:
                message = await pubsub.get_message(timeout=interval_s)
                if message is None:
                    self.expire()
                else:
                    self.receive(message.get("data"))
