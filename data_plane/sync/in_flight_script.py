"""In-flight sharing's exchange script and its pure planning (docs/data_plane.md, "In-flight
sharing"): which endpoint group an endpoint is in, what one exchange sends per group (only the
counts that changed, or everything at a full refresh), the others' sum from an answer, and
how long to wait before the next exchange.

Endpoints are spread over `groups` groups by a stable hash of their id; each group has its own
keys under its own hash tag (`contracts/redis_keys.py`), so a Redis Cluster spreads the groups
over its slots and each script call touches one group's endpoints only.
"""

from __future__ import annotations

import json
import zlib
from collections.abc import Mapping

# KEYS (one group): held (hash `replica \x1f endpoint` -> count), seen (zset replica -> ms),
# total (hash endpoint -> summed count), owners (hash instance id -> process token), answer
# (hash: json = the total as JSON, at = when it was encoded (ms), dirty = '1' when the total
# changed since). A replica is "instance id \x1f process token". ARGV: instance id, process
# token, ttl ms, key lifetime ms, fresh ms, mode ('d' delta, 'f' full refresh; with 'o' after
# it, as in group 0's call, this call also keeps `owners` and looks for a clash), then endpoint,
# count pairs: the replica's count as it is now (absolute, so a call applied twice is
# harmless), of the endpoints that changed (delta) or of every endpoint it holds or held
# (full). Replies one string of four lines (one bulk string: the client reads one reply line,
# not five): the replicas heard (group 0's call only, else empty); the token of another
# process heard within the TTL under our instance id, or empty; 1 when a delta came from a
# replica Redis did not hold (pruned or lost: its counts are applied, and the replica sends
# everything at once), or empty; the answer's JSON (clients parse it in C; JSON has no raw
# newline).
# The JSON answer is encoded again only when the total changed and the one held is at least
# `fresh ms` old: however many replicas exchange, a group is encoded at most once per `fresh
# ms`, and an answer is at most that much older than the total. Time is Redis's own; scripts
# replicate their effects (Redis >= 5), so TIME before writes is allowed.
EXCHANGE_SCRIPT = """
local held, seen, total, owners, answer = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local instance, process, ttl_ms = ARGV[1], ARGV[2], tonumber(ARGV[3])
local keep_ms, fresh_ms = tonumber(ARGV[4]), tonumber(ARGV[5])
local mode, owning = string.sub(ARGV[6], 1, 1), string.sub(ARGV[6], 2) == 'o'
local me = instance .. '\\31' .. process
local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
local dirty = false
local function put(who, endpoints, counts)
  for first = 1, #endpoints, 1000 do
    local names, fields = {}, {}
    for i = first, math.min(first + 999, #endpoints) do
      names[#names + 1] = endpoints[i]
      fields[#fields + 1] = who .. '\\31' .. endpoints[i]
    end
    local old = redis.call('HMGET', held, unpack(fields))
    local sums = redis.call('HMGET', total, unpack(names))
    local set_held, del_held, set_total, del_total = {}, {}, {}, {}
    for i, name in ipairs(names) do
      local n = counts[first + i - 1]
      local d = n - (tonumber(old[i]) or 0)
      if d ~= 0 then
        dirty = true
        if n > 0 then
          set_held[#set_held + 1] = fields[i]
          set_held[#set_held + 1] = n
        else
          del_held[#del_held + 1] = fields[i]
        end
        local s = (tonumber(sums[i]) or 0) + d
        if s > 0 then
          set_total[#set_total + 1] = name
          set_total[#set_total + 1] = s
        else
          del_total[#del_total + 1] = name
        end
      end
    end
    if #set_held > 0 then redis.call('HSET', held, unpack(set_held)) end
    if #del_held > 0 then redis.call('HDEL', held, unpack(del_held)) end
    if #set_total > 0 then redis.call('HSET', total, unpack(set_total)) end
    if #del_total > 0 then redis.call('HDEL', total, unpack(del_total)) end
  end
end
local quiet = redis.call('ZRANGEBYSCORE', seen, '-inf', now - ttl_ms)
if #quiet > 0 then
  local flat = redis.call('HGETALL', held)
  for _, who in ipairs(quiet) do
    local head, endpoints, zeros = who .. '\\31', {}, {}
    for i = 1, #flat, 2 do
      if string.sub(flat[i], 1, #head) == head then
        endpoints[#endpoints + 1] = string.sub(flat[i], #head + 1)
        zeros[#zeros + 1] = 0
      end
    end
    put(who, endpoints, zeros)
    redis.call('ZREM', seen, who)
    local id, token = string.match(who, '^(.*)\\31(.*)$')
    if id and redis.call('HGET', owners, id) == token then redis.call('HDEL', owners, id) end
  end
end
local clash, owner = false, owning and redis.call('HGET', owners, instance)
if owner and owner ~= process and redis.call('ZSCORE', seen, instance .. '\\31' .. owner) then
  clash = owner
end
local endpoints, counts = {}, {}
for i = 7, #ARGV, 2 do
  endpoints[#endpoints + 1] = ARGV[i]
  counts[#counts + 1] = tonumber(ARGV[i + 1])
end
put(me, endpoints, counts)
local resend = redis.call('ZADD', seen, now, me) == 1 and mode == 'd'
if owning and owner ~= process then redis.call('HSET', owners, instance, process) end
local a = redis.call('HMGET', answer, 'json', 'at', 'dirty')
local encoded = a[1]
if not encoded or ((dirty or a[3] == '1') and now - (tonumber(a[2]) or 0) >= fresh_ms) then
  local flat, sums = redis.call('HGETALL', total), {}
  for i = 1, #flat, 2 do sums[flat[i]] = tonumber(flat[i + 1]) end
  encoded = next(sums) and cjson.encode(sums) or '{}'
  redis.call('HSET', answer, 'json', encoded, 'at', now, 'dirty', '0')
elseif dirty and a[3] ~= '1' then
  redis.call('HSET', answer, 'dirty', '1')
end
if redis.call('PTTL', seen) < keep_ms / 2 then
  for _, key in ipairs(KEYS) do redis.call('PEXPIRE', key, keep_ms) end
end
local head = (owning and redis.call('ZCARD', seen) or '') .. '\\n' .. (clash or '') .. '\\n'
return head .. (resend and '1' or '') .. '\\n' .. encoded
"""


def split_reply(reply: str | bytes) -> tuple[int, str | None, bool, bytes]:
    """(replicas heard (0 when the call did not count them), a clashing process token or
    None, whether to send everything, the sum's JSON) from one script reply (PURE)."""
    raw = reply.encode() if isinstance(reply, str) else reply
    held, clash, resend, total = raw.split(b"\n", 3)
    return int(held or 0), clash.decode() or None, resend == b"1", total


def group_of(endpoint: str, groups: int) -> int:
    """The endpoint's group (PURE): a hash of its id every replica computes alike."""
    return zlib.crc32(endpoint.encode()) % groups


def changed_counts(own: Mapping[str, int], sent: Mapping[str, int]) -> dict[str, int]:
    """The counts that differ from those Redis last took (PURE), as they are now; an endpoint
    gone from `own` is sent as 0 if Redis held a count for it."""
    get = sent.get
    changed = {e: n for e, n in own.items() if get(e, 0) != n}
    for endpoint, n in sent.items():
        if n and endpoint not in own:
            changed[endpoint] = 0
    return changed


def full_counts(own: Mapping[str, int], ever: set[str]) -> dict[str, int]:
    """Everything (PURE): this replica's count of every endpoint it has or ever had in flight
    (0 for the idle ones), so a full refresh overwrites whatever Redis holds for it."""
    counts = {e: n for e, n in own.items() if n > 0 or e in ever}
    for endpoint in ever.difference(counts):
        counts[endpoint] = 0
    return counts


def peers_from(total: str | bytes, mine: Mapping[str, int]) -> dict[str, float]:
    """The others' counts (PURE): the sum Redis answered (JSON `{endpoint: count}`), less this
    replica's own snapshot, which the sum includes. A malformed answer counts as none."""
    try:
        summed = json.loads(total)
        get = mine.get
        return {e: rest for e, n in summed.items() if (rest := n - get(e, 0)) > 0}
    except (ValueError, TypeError, AttributeError):  # not JSON, a value not a number, not a dict
        return {}


def next_wait_s(
    replicas_held: int, quiet: int, interval_s: float, max_interval_s: float, ttl_s: float
) -> float:
    """Until the next exchange (PURE). While other replicas are heard: `interval_s` after an
    exchange that changed something (our counts or the others' sum), doubled for each quiet
    exchange in a row up to `max_interval_s`; alone (or after a failed exchange) every
    `ttl_s` / 2, so our counts never expire."""
    if replicas_held <= 1:
        return max(interval_s, ttl_s / 2)
    grown = interval_s * float(2 ** min(quiet, 16))
    return max(interval_s, min(max_interval_s, grown))
