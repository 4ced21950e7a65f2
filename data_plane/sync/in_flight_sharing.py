"""Replicas share their in-flight counts per endpoint, so load between scrapes is not herded
(docs/data_plane.md, "In-flight sharing").

Endpoints are spread over groups, each with keys of its own under its own hash tag
(`in_flight_script.py`): a Redis Cluster spreads the groups over its slots. Every exchange a
replica calls the exchange script once per group, all calls in one round trip on a standalone
Redis or Sentinel's master. Each call carries only the counts that changed since Redis last
took them (as they are now, so a call applied twice does no harm), or all of them at a full
refresh every `refresh_s` and whenever Redis no longer holds this replica (it went quiet past
the TTL, or Redis lost its data): a lost update heals within `refresh_s`. Redis keeps, per
group and atomically, each replica's counts, when it was heard, and the sum over the replicas
heard within `ttl_s`, and answers the sum as one JSON string, encoded again at most every
`fresh_s` however many replicas exchange. The replica takes its own counts off and hands the
rest to the load tracker. After an exchange that changed nothing (our counts and every
group's answer as before), the wait doubles up to `max_interval_s`; any change brings it back
to `interval_s`. A replica that hears no other waits `ttl_s` / 2, enough to stay visible. No
Redis I/O on the request path; with Redis unreachable, the peers' counts are dropped `ttl_s`
after the last answer, and each replica falls back to its own in-flight plus the scrape.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import redis.asyncio as aioredis
from redis.exceptions import RedisError

from contracts.redis_keys import RedisKeys
from data_plane.sync.in_flight_script import (
    EXCHANGE_SCRIPT,
    changed_counts,
    full_counts,
    group_of,
    next_wait_s,
    peers_from,
    split_reply,
)
from data_plane.sync.replica_identity import ReplicaIdentity
from data_plane.sync.script_link import ScriptLink

# The exchange script, callable with keys and args: a `ScriptLink` (what `run` uses: one round
# trip for every group), or redis-py's `AsyncScript` (tests: one call after the other).
Script = Callable[..., Awaitable[Any]]
Reply = tuple[int, str | None, bool, bytes]  # split_reply's

GROUPS = 1  # IN_FLIGHT_SHARE_GROUPS's default on a standalone Redis or Sentinel
CLUSTER_GROUPS = 3  # ...and on a cluster (one per master of the smallest cluster)
REFRESH_S = 5.0  # the default IN_FLIGHT_SHARE_REFRESH_S

logger = logging.getLogger(__name__)


class InFlightSharing:
    """Exchanges `own()` for the others' sum every interval; applies it through `on_peers`.

    Only changed counts are sent (all of them every `refresh_s`, or when Redis asks), and an
    answer equal to the last one applied, with our counts unchanged, is not applied again: an
    idle fleet costs each replica one round trip per exchange and Redis no encoding."""

    def __init__(
        self,
        keys: RedisKeys,
        identity: ReplicaIdentity,
        own: Callable[[], Mapping[str, int]],
        on_peers: Callable[[Mapping[str, float]], None],
        ttl_s: float,
        clock: Callable[[], float],
        *,
        groups: int = GROUPS,
        refresh_s: float = REFRESH_S,
        fresh_s: float = 0.0,
    ) -> None:
        self._keys = [keys.in_flight_group(g, groups) for g in range(groups)]
        self._identity, self._own, self._on_peers = identity, own, on_peers
        self._ttl_s, self._clock, self._refresh_s = ttl_s, clock, refresh_s
        ttl_ms = int(ttl_s * 1000)
        self._head = (
            identity.instance_id,
            identity.process,
            ttl_ms,
            ttl_ms * 4,
            int(fresh_s * 1000),
        )
        self._group: dict[str, int] = {}  # endpoint -> its group, computed once
        self._sent: dict[str, int] | None = None  # own() as Redis last took it; None: unknown
        self._ever: set[str] = set()  # endpoints Redis ever took a positive count of from us
        self._mine: dict[str, int] = {}  # our positive counts, which the sums include
        self._applied: list[bytes | None] = [None] * groups  # answers last applied
        self._refresh_at = float("-inf")  # the next full refresh, on `clock`
        self._answered_at: float | None = None  # clock time of the last answer
        self.replicas_held = 0  # replicas in the last answer, this one included
        self.quiet = 0  # exchanges in a row that changed nothing (they lengthen the wait)
        self.exchanges = 0  # answered exchanges (tests and logs)
        self.snapshots_sent = 0  # answered exchanges that carried changed counts
        self.full_sent = 0  # answered exchanges that carried everything

    async def exchange(self, script: Script | ScriptLink) -> None:
        """One round trip: send what changed, apply the others' sum if it changed."""
        own = dict(self._own())
        full = self._sent is None or self._clock() >= self._refresh_at
        counts, replies = await self._send(script, own, full)
        if not full and any(reply[2] for reply in replies):
            full = True  # Redis no longer holds us: send everything, now
            counts, replies = await self._send(script, own, True)
        self._sent = own
        self._ever.update(e for e, n in counts.items() if n > 0)
        if full:
            self._refresh_at = self._clock() + self._refresh_s
            self.full_sent += 1
        if counts:
            self._mine = {e: n for e, n in own.items() if n > 0}
            self.snapshots_sent += 1
        self._take(replies, changed=bool(counts))

    async def _send(
        self, script: Script | ScriptLink, own: dict[str, int], full: bool
    ) -> tuple[dict[str, int], list[Reply]]:
        """One call per group with its share of the counts; the replies in group order."""
        assert full or self._sent is not None
        counts = full_counts(own, self._ever) if full else changed_counts(own, self._sent or {})
        per_group: list[list[str | int]] = [[] for _ in self._keys]
        group, groups = self._group, len(self._keys)
        for endpoint, n in counts.items():
            g = group.get(endpoint)
            if g is None:
                g = group[endpoint] = group_of(endpoint, groups)
            per_group[g] += (endpoint, n)
        mode = "f" if full else "d"
        calls = [
            (k, (*self._head, mode + ("o" if g == 0 else ""), *args))  # group 0 keeps owners
            for g, (k, args) in enumerate(zip(self._keys, per_group, strict=True))
        ]
        self._sent = None  # until answered: after an error Redis may hold either
        if isinstance(script, ScriptLink):
            replies = await script.batch(calls)
        else:
            replies = [await script(keys=k, args=a) for k, a in calls]
        return counts, [split_reply(reply) for reply in replies]

    def _take(self, replies: list[Reply], changed: bool) -> None:
        """Note the answers; hand the others' sum on if it or our counts changed."""
        for reply in replies:
            clash = reply[1]
            if clash is not None:  # another process exchanges under our id: said out loud there
                self._identity.is_own(self._identity.instance_id, clash)
        self._answered_at = self._clock()
        self.replicas_held = max(int(reply[0]) for reply in replies)
        self.exchanges += 1
        totals: list[bytes | None] = [reply[3] for reply in replies]
        if changed or totals != self._applied:
            self._applied = totals
            peers: dict[str, float] = {}
            for total in totals:
                if total is not None:  # never: a reply always carries its group's sum
                    peers.update(peers_from(total, self._mine))
            self._on_peers(peers)
            self.quiet = 0
        else:
            self.quiet += 1

    def expire(self) -> None:
        """No answer within `ttl_s`: the others' counts are unknown; drop them."""
        if self._answered_at is not None and self._clock() - self._answered_at > self._ttl_s:
            self._answered_at = None
            self.replicas_held = 0
            self._applied = [None] * len(self._keys)
            self._on_peers({})

    async def run(
        self, client: aioredis.Redis, interval_s: float, max_interval_s: float | None = None
    ) -> None:
        """Exchange forever on a connection of its own, every `interval_s` while something
        changes and up to `max_interval_s` while nothing does; after a Redis error, retry at
        the lone rate (counts expire)."""
        script = ScriptLink(client, EXCHANGE_SCRIPT)
        longest = interval_s if max_interval_s is None else max_interval_s
        try:
            while True:
                try:
                    await self.exchange(script)
                except (RedisError, OSError) as err:
                    logger.debug("in-flight sharing unavailable: %s", err)
                    self.replicas_held = 0
                    self.expire()
                wait = next_wait_s(self.replicas_held, self.quiet, interval_s, longest, self._ttl_s)
                await asyncio.sleep(wait)
        finally:
            await script.close()
