"""Shares this instance's live state (breakers, in-flight, traffic) in Redis for operators.

Every few seconds one `DataPlaneState` is written with a TTL, so a dead instance disappears by
itself. Failures are ignored (counted at DEBUG): this is never on the request path and never
carries prompts, keys or endpoint URLs.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable, Mapping
from datetime import UTC, datetime

import redis.asyncio as aioredis
from redis.exceptions import RedisError

from contracts.live_state import BreakerState, ClassCounters, DataPlaneState, EndpointState
from contracts.redis_keys import RedisKeys
from data_plane.resilience.endpoint_load import LoadTracker
from data_plane.sync.replica_identity import ReplicaIdentity
from data_plane.table_store import TableStore
from data_plane.telemetry.traffic import TrafficStats

logger = logging.getLogger(__name__)
_BREAKER: dict[str, BreakerState] = {"closed": "closed", "half_open": "half_open", "open": "open"}


def build_state(
    instance: str,
    store: TableStore,
    tracker: LoadTracker,
    breaker_state: Callable[[str], str],
    traffic: TrafficStats,
    now: float,
    classes: tuple[Mapping[str, ClassCounters], Mapping[str, ClassCounters]] = ({}, {}),
) -> DataPlaneState:
    """The state of every endpoint of the served table, as of wall-clock `now`."""
    table = store.current
    endpoints: list[EndpointState] = []
    if table is not None:
        for pair in table.pairs:
            for endpoint in pair.endpoints:
                endpoints.append(
                    EndpointState(
                        endpoint_id=endpoint.id,
                        pair=pair.pair,
                        breaker=_BREAKER[breaker_state(endpoint.id)],
                        in_flight=tracker.in_flight(endpoint.id),
                    )
                )
    return DataPlaneState(
        instance=instance,
        table_version=None if table is None else table.version,
        updated_at=datetime.fromtimestamp(now, UTC),
        endpoints=tuple(endpoints),
        requests_by_pair=dict(traffic.requests_by_pair),
        fallbacks_total=traffic.fallbacks,
        pairs={name: totals.snapshot() for name, totals in sorted(traffic.pairs.items())},
        tenants=dict(classes[0]),
        priorities=dict(classes[1]),
    )


def _writer_of(raw: bytes | str) -> object:
    """The process token in a stored live state (None when absent or unreadable)."""
    try:
        doc = json.loads(raw)
    except ValueError:
        return None
    return doc.get("process") if isinstance(doc, dict) else None


class LiveStateWriter:
    """Writes `build()`'s state to `data_plane_state(instance)` every interval, with a TTL,
    signed with this process's token; the value it replaces says whether another process
    writes the same key (`ReplicaIdentity.is_own`)."""

    def __init__(
        self,
        client: aioredis.Redis,
        keys: RedisKeys,
        identity: ReplicaIdentity,
        ttl_s: int,
        build: Callable[[], DataPlaneState],
    ) -> None:
        self._client = client
        self._key = keys.data_plane_state(identity.instance_id)
        self._identity = identity
        self._ttl_s = ttl_s
        self._build = build
        self.failures = 0

    async def write_once(self) -> bool:
        """One write; False (and counted) when Redis did not take it."""
        me = self._identity
        try:
            payload = self._build().model_copy(update={"process": me.process})
            text = payload.model_dump_json()
            replaced = await self._client.set(self._key, text, ex=self._ttl_s, get=True)
        except (RedisError, OSError, ValueError) as err:  # ValueError: a field out of bounds
            self.failures += 1
            logger.debug("live state not written: %s", type(err).__name__)
            return False
        if isinstance(replaced, bytes | str):
            me.is_own(me.instance_id, _writer_of(replaced))
        return True

    async def run(self, interval_s: float) -> None:
        while True:
            await self.write_once()
            await asyncio.sleep(interval_s)
