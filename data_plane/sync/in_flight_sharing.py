"""Replicas share their in-flight counts per endpoint, so load between scrapes is not herded
(docs/data_plane.md, "In-flight sharing").

Every `interval_s` a replica hands Redis its own in-flight counts per endpoint in one script
call (`EXCHANGE_SCRIPT`). Redis keeps, atomically, each replica's latest snapshot, when it came,
and the running sum over the replicas heard within `ttl_s` (a newer snapshot changes the sum by
its difference; a replica that went quiet is subtracted), and answers with that sum and how
many replicas it holds. The replica takes its own counts off and hands the rest to the load
tracker. So one replica's work per interval is one round trip plus work in proportion to the
endpoints, whatever the number of replicas (a pub/sub exchange, where every replica parsed every
other's message, cost each replica work in proportion to replicas x endpoints per interval). A
replica that holds no other replica's snapshot exchanges every `ttl_s` / 2 only, enough to stay
visible. No Redis I/O on the request path; with Redis unreachable, the peers' counts are
dropped `ttl_s` after the last answer, and each replica falls back to its own in-flight plus
the scrape.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable, Mapping

import redis.asyncio as aioredis
from redis.commands.core import AsyncScript
from redis.exceptions import RedisError

from data_plane.sync.replica_identity import ReplicaIdentity

logger = logging.getLogger(__name__)

# KEYS: snapshots (hash replica -> JSON counts), seen (zset replica -> ms), total (string: JSON
# endpoint -> summed count), owners (hash instance id -> process token). A replica is
# "instance id \x1f process token": two processes under one id are two replicas. ARGV: instance
# id, process token, ttl ms, JSON counts, key lifetime ms. Replies {replicas held, the total's
# JSON (one string: clients parse it in C), the token of another process heard within the TTL
# under our instance id, or nil}. The sum lives as JSON, decoded and re-encoded once per call:
# cheaper for Redis than a hash read back whole each time. Time is Redis's own (replicas'
# clocks may differ); scripts replicate their effects (Redis >= 5), so TIME before writes is
# allowed.
EXCHANGE_SCRIPT = """
local snaps, seen, total, owners = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local instance, process, ttl_ms = ARGV[1], ARGV[2], tonumber(ARGV[3])
local me = instance .. '\31' .. process
local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
local stored = redis.call('GET', total)
local sums = stored and cjson.decode(stored) or {}
local function add(counts, sign)
  for endpoint, n in pairs(counts) do
    local v = (sums[endpoint] or 0) + sign * n
    if v > 0 then sums[endpoint] = v else sums[endpoint] = nil end
  end
end
for _, who in ipairs(redis.call('ZRANGEBYSCORE', seen, '-inf', now - ttl_ms)) do
  local held = redis.call('HGET', snaps, who)
  if held then add(cjson.decode(held), -1) end
  redis.call('HDEL', snaps, who)
  redis.call('ZREM', seen, who)
  local id, token = string.match(who, '^(.*)\31(.*)$')
  if id and redis.call('HGET', owners, id) == token then redis.call('HDEL', owners, id) end
end
local clash = false
local owner = redis.call('HGET', owners, instance)
if owner and owner ~= process and redis.call('ZSCORE', seen, instance .. '\31' .. owner) then
  clash = owner
end
local held = redis.call('HGET', snaps, me)
if held then add(cjson.decode(held), -1) end
add(cjson.decode(ARGV[4]), 1)
local encoded = cjson.encode(sums)
redis.call('SET', total, encoded, 'PX', ARGV[5])
redis.call('HSET', snaps, me, ARGV[4])
redis.call('ZADD', seen, now, me)
redis.call('HSET', owners, instance, process)
for _, key in ipairs({snaps, seen, owners}) do redis.call('PEXPIRE', key, ARGV[5]) end
return {redis.call('ZCARD', seen), encoded, clash}
"""


def peers_from(total: str | bytes, mine: Mapping[str, int]) -> dict[str, float]:
    """The others' counts (PURE): the sum Redis answered (JSON `{endpoint: count}`), less this
    replica's own snapshot, which the sum includes. A malformed answer counts as none."""
    try:
        summed = json.loads(total)
        return {e: float(rest) for e, n in summed.items() if (rest := n - mine.get(e, 0)) > 0}
    except (ValueError, TypeError, AttributeError):  # not JSON, a value not a number, not a dict
        return {}


def next_wait_s(replicas_held: int, interval_s: float, ttl_s: float) -> float:
    """Until the next exchange (PURE): `interval_s` while other replicas are heard; alone (or
    after a failed exchange) every `ttl_s` / 2, so the snapshot never expires."""
    return interval_s if replicas_held > 1 else max(interval_s, ttl_s / 2)


class InFlightSharing:
    """Exchanges `own()` for the others' sum every interval; applies it through `on_peers`."""

    def __init__(
        self,
        keys: tuple[str, str, str, str],
        identity: ReplicaIdentity,
        own: Callable[[], Mapping[str, int]],
        on_peers: Callable[[Mapping[str, float]], None],
        ttl_s: float,
        clock: Callable[[], float],
    ) -> None:
        self._keys, self._identity = keys, identity
        self._own, self._on_peers = own, on_peers
        self._ttl_s, self._clock = ttl_s, clock
        self._answered_at: float | None = None  # clock time of the last answer
        self.replicas_held = 0  # replicas in the last answer, this one included
        self.exchanges = 0  # answered exchanges (tests and logs)

    async def exchange(self, script: AsyncScript) -> None:
        """One round trip: send our snapshot, apply the others' sum."""
        mine = {e: n for e, n in self._own().items() if n > 0}
        ttl_ms, keep_ms = int(self._ttl_s * 1000), int(self._ttl_s * 4000)
        me = self._identity
        args = (me.instance_id, me.process, ttl_ms, json.dumps(mine), keep_ms)
        held, total, clash = await script(keys=self._keys, args=args)
        if clash is not None:  # another process exchanges under our id: said out loud there
            me.is_own(me.instance_id, clash.decode() if isinstance(clash, bytes) else clash)
        self._answered_at = self._clock()
        self.replicas_held = int(held)
        self.exchanges += 1
        self._on_peers(peers_from(total, mine))

    def expire(self) -> None:
        """No answer within `ttl_s`: the others' counts are unknown; drop them."""
        if self._answered_at is not None and self._clock() - self._answered_at > self._ttl_s:
            self._answered_at = None
            self.replicas_held = 0
            self._on_peers({})

    async def run(self, client: aioredis.Redis, interval_s: float) -> None:
        """Exchange forever; after a Redis error, retry at the lone rate (counts expire)."""
        script = client.register_script(EXCHANGE_SCRIPT)
        while True:
            try:
                await self.exchange(script)
            except (RedisError, OSError) as err:
                logger.debug("in-flight sharing unavailable: %s", err)
                self.replicas_held = 0
                self.expire()
            await asyncio.sleep(next_wait_s(self.replicas_held, interval_s, self._ttl_s))
