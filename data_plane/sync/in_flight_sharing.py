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
snapshot that did not change since Redis last took one is not sent (Redis only notes that the
replica is alive), and a sum that did not change is not applied again, so an idle fleet costs a
round trip per interval. A replica that holds no other replica's snapshot exchanges every
`ttl_s` / 2 only, enough to stay visible. No Redis I/O on the request path; with Redis
unreachable, the peers' counts are dropped `ttl_s` after the last answer, and each replica
falls back to its own in-flight plus the scrape.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import redis.asyncio as aioredis
from redis.exceptions import RedisError

from data_plane.sync.replica_identity import ReplicaIdentity
from data_plane.sync.script_link import ScriptLink

# The exchange script, callable with keys and args: a `ScriptLink` (what `run` uses), or
# redis-py's `AsyncScript` (tests).
Script = Callable[..., Awaitable[Any]]

logger = logging.getLogger(__name__)

# KEYS: snapshots (hash replica -> JSON counts), seen (zset replica -> ms), total (string: JSON
# endpoint -> summed count), owners (hash instance id -> process token). A replica is
# "instance id \x1f process token": two processes under one id are two replicas. ARGV: instance
# id, process token, ttl ms, JSON counts (empty: unchanged since the last exchange, keep the
# held snapshot), key lifetime ms. Replies {replicas held, the total's JSON (one string: clients
# parse it in C), the token of another process heard within the TTL under our instance id or
# nil, 1 when an empty ARGV[4] found no held snapshot (expired or lost: send it whole) or nil}.
# The sum lives as JSON, decoded and re-encoded only when a snapshot changed or a replica went
# quiet: cheaper for Redis than a hash read back whole each time. Time is Redis's own
# (replicas' clocks may differ); scripts replicate their effects (Redis >= 5), so TIME before
# writes is allowed.
EXCHANGE_SCRIPT = """
local snaps, seen, total, owners = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local instance, process, ttl_ms = ARGV[1], ARGV[2], tonumber(ARGV[3])
local me = instance .. '\31' .. process
local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
local stored = redis.call('GET', total)
local sums = nil
local function add(counts, sign)
  sums = sums or (stored and cjson.decode(stored) or {})
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
local resend = false
if ARGV[4] ~= '' then
  if held then add(cjson.decode(held), -1) end
  add(cjson.decode(ARGV[4]), 1)
  redis.call('HSET', snaps, me, ARGV[4])
elseif not held then
  resend = 1
end
local encoded = stored or '{}'
if sums or not stored then
  encoded = cjson.encode(sums or {})
  redis.call('SET', total, encoded, 'PX', ARGV[5])
else
  redis.call('PEXPIRE', total, ARGV[5])
end
redis.call('ZADD', seen, now, me)
redis.call('HSET', owners, instance, process)
for _, key in ipairs({snaps, seen, owners}) do redis.call('PEXPIRE', key, ARGV[5]) end
return {redis.call('ZCARD', seen), encoded, clash, resend}
"""


def peers_from(total: str | bytes, mine: Mapping[str, int]) -> dict[str, float]:
    """The others' counts (PURE): the sum Redis answered (JSON `{endpoint: count}`), less this
    replica's own snapshot, which the sum includes. A malformed answer counts as none."""
    try:
        summed = json.loads(total)
        get = mine.get
        return {e: rest for e, n in summed.items() if (rest := n - get(e, 0)) > 0}
    except (ValueError, TypeError, AttributeError):  # not JSON, a value not a number, not a dict
        return {}


def next_wait_s(replicas_held: int, interval_s: float, ttl_s: float) -> float:
    """Until the next exchange (PURE): `interval_s` while other replicas are heard; alone (or
    after a failed exchange) every `ttl_s` / 2, so the snapshot never expires."""
    return interval_s if replicas_held > 1 else max(interval_s, ttl_s / 2)


class InFlightSharing:
    """Exchanges `own()` for the others' sum every interval; applies it through `on_peers`.

    A snapshot equal to the last one Redis took is not sent again (Redis keeps it and only
    notes that this replica is alive), and an answer equal to the last one applied, with our
    snapshot unchanged, is not applied again: an idle fleet costs each replica one round trip
    per interval and Redis no decoding."""

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
        self._head = (identity.instance_id, identity.process, int(ttl_s * 1000))
        self._keep_ms = int(ttl_s * 4000)
        self._sent: dict[str, int] | None = None  # own() as Redis last took it; None: unknown
        self._mine: dict[str, int] = {}  # its positive counts, which the sum includes
        self._applied: str | bytes | None = None  # the answer last handed to on_peers
        self._answered_at: float | None = None  # clock time of the last answer
        self.replicas_held = 0  # replicas in the last answer, this one included
        self.exchanges = 0  # answered exchanges (tests and logs)
        self.snapshots_sent = 0  # answered exchanges that carried a changed snapshot

    async def exchange(self, script: Script) -> None:
        """One round trip: send our snapshot if it changed, apply the others' sum if it did."""
        own = self._own()
        changed = own != self._sent
        sent, snapshot = self._sent, ""
        if changed:
            sent, self._sent = dict(own), None  # after an error Redis may hold either one
            self._mine = {e: n for e, n in sent.items() if n > 0}
            snapshot = json.dumps(self._mine)
        args = (*self._head, snapshot, self._keep_ms)
        held, total, clash, resend = await script(keys=self._keys, args=args)
        if resend is not None:  # Redis no longer holds our snapshot: send it whole, now
            self._sent = None
            await self.exchange(script)
            return
        if clash is not None:  # another process exchanges under our id: said out loud there
            me = self._identity
            me.is_own(me.instance_id, clash.decode() if isinstance(clash, bytes) else clash)
        self._answered_at = self._clock()
        self.replicas_held = int(held)
        self.exchanges += 1
        if changed:
            self._sent, self.snapshots_sent = sent, self.snapshots_sent + 1
        if changed or total != self._applied:
            self._applied = total
            self._on_peers(peers_from(total, self._mine))

    def expire(self) -> None:
        """No answer within `ttl_s`: the others' counts are unknown; drop them."""
        if self._answered_at is not None and self._clock() - self._answered_at > self._ttl_s:
            self._answered_at = None
            self.replicas_held = 0
            self._applied = None
            self._on_peers({})

    async def run(self, client: aioredis.Redis, interval_s: float) -> None:
        """Exchange forever on a connection of its own; after a Redis error, retry at the lone
        rate (counts expire)."""
        script = ScriptLink(client, EXCHANGE_SCRIPT)
        try:
            while True:
                try:
                    await self.exchange(script)
                except (RedisError, OSError) as err:
                    logger.debug("in-flight sharing unavailable: %s", err)
                    self.replicas_held = 0
                    self.expire()
                await asyncio.sleep(next_wait_s(self.replicas_held, interval_s, self._ttl_s))
        finally:
            await script.close()
