"""Replicas share their in-flight counts per endpoint through sums Redis keeps, so load between
scrapes is not herded (docs/data_plane.md, "In-flight sharing").

Endpoints are spread over groups, each with keys of its own under its own hash tag: a Redis
Cluster spreads the groups over its slots. Per group and epoch Redis holds the sum of every
replica's counts (`in_flight_epochs.py`): each exchange a replica adds only the counts that
changed since its last write (one BITFIELD per epoch it is in), enters the next epoch whole
shortly before it starts, and reads the epoch of the time with one GET, less its own counts.
All of a group's commands go in one round trip with every other group's (on a standalone Redis
or Sentinel's master; a cluster's client routes each to its slot's owner). Redis's work per
exchange grows with the counts that changed, not with the replicas or the endpoints. A new
endpoint gets a position in the group's index (two more round trips, once per endpoint and
fleet: a script hands out the next position to an endpoint the index does not hold); a
count at a position this replica has not learnt yet reads the index again. Epochs
follow the wall clock (the replicas' clocks must agree within the lead). After an error the
epochs written to are barred and positions learnt again: the replica's counts are back in the
sums from the next epoch, at most `ttl_s` later. After an exchange that changed nothing, the
wait doubles up to `max_interval_s` (`next_wait_s`), never past the lead, so that every replica
is in an epoch before it is read. Once per epoch read, the replicas in it are listed (a twin
under our instance id is said out loud: `ReplicaIdentity`), counted otherwise. No Redis I/O on
the request path; with Redis unreachable, the peers' counts are dropped `ttl_s` after the last
answer.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from itertools import repeat
from typing import Any

import numpy as np
import redis.asyncio as aioredis
from redis.exceptions import RedisError

from contracts.redis_keys import InFlightKeys, RedisKeys
from data_plane.sync.command_link import Command, CommandLink, Packed
from data_plane.sync.in_flight_epochs import (
    Counts,
    decoded,
    epoch_lengths,
    epochs_due,
    group_of,
    grown,
    increments,
    named,
    next_wait_s,
    others,
)
from data_plane.sync.replica_identity import ReplicaIdentity

GROUPS = 1  # IN_FLIGHT_SHARE_GROUPS's default on a standalone Redis or Sentinel
CLUSTER_GROUPS = 3  # ...and on a cluster (one per master of the smallest cluster)

logger = logging.getLogger(__name__)


def _bitfield(key: str, changes: tuple[list[bytes], bytes]) -> Packed:
    """One BITFIELD of `increments`, packed once (it is sent to each epoch the replica is in)."""
    args, packed = changes
    name = key.encode()
    head = b"*%d\r\n$8\r\nBITFIELD\r\n$%d\r\n%b\r\n" % (2 + len(args), len(name), name)
    return Packed(("BITFIELD", key, *args), head + packed)


_CREATE = (
    [b"INCRBY", b"i32", b"#0", b"0"],
    b"$6\r\nINCRBY\r\n$3\r\ni32\r\n$2\r\n#0\r\n$1\r\n0\r\n",
)


# Positions for endpoints new to the index, one each, in one step (KEYS[1]: the group's index;
# ARGV: the endpoints; "" holds the last position handed out).
_CLAIM = """
local positions = {}
for i, endpoint in ipairs(ARGV) do
  local position = redis.call('HGET', KEYS[1], endpoint)
  if not position then
    position = redis.call('HINCRBY', KEYS[1], '', 1)
    redis.call('HSET', KEYS[1], endpoint, position)
  end
  positions[i] = tonumber(position)
end
return positions
"""


def _empty() -> Counts:
    return np.zeros(0, dtype=np.int64)


@dataclass
class _Group:
    """What this replica knows of one endpoint group."""

    keys: InFlightKeys
    names: list[str | None] = field(default_factory=list)  # position -> endpoint, as learnt
    endpoints: list[str] = field(default_factory=list)  # ours with a position, in order
    positions: list[int] = field(default_factory=list)  # ...and their positions
    sent: Counts = field(default_factory=_empty)  # what we added to each epoch in `joined`
    joined: set[int] = field(default_factory=set)  # epochs holding exactly `sent` of ours
    barred: set[int] = field(default_factory=set)  # epochs a write without answer may reach
    applied: bytes | None = None  # the others' counts last applied

    def learn(self, endpoint: str, position: int) -> None:
        if position >= len(self.names):
            self.names += [None] * (position + 1 - len(self.names))
        self.names[position] = endpoint


class InFlightSharing:
    """Exchanges `own()` for the others' sum every interval; applies it through `on_peers`
    when it changed."""

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
        epoch_clock: Callable[[], float] = time.time,
    ) -> None:
        """`epoch_clock`: the wall clock the epochs follow (the replicas' clocks agree within
        the lead less the longest wait, 150 ms at the defaults; NTP keeps them within a few
        ms)."""
        self._groups = [_Group(keys.in_flight_group(g, groups)) for g in range(groups)]
        self._identity, self._own, self._on_peers = identity, own, on_peers
        self._ttl_s, self._clock, self._epoch_clock = ttl_s, clock, epoch_clock
        self._period_s, self._lead_s = epoch_lengths(ttl_s)
        self._me = f"{identity.instance_id}\x1f{identity.process}".encode()
        self._life_ms = int(2 * ttl_s * 1000)  # an epoch's keys, renewed by each entry
        self._keep_ms = int(max(10 * ttl_s, 60.0) * 1000)  # the index, renewed by each entry
        self._listed: int | None = None  # the epoch whose replicas were listed
        self._where: dict[str, int] = {}  # endpoint -> group, for those with a position
        self._answered_at: float | None = None
        self.replicas_held = 0  # replicas in the last answer, this one included (held while
        # an exchange is in flight; 0 after an error or without answers for the TTL)
        self.quiet = 0  # exchanges in a row that changed nothing (they lengthen the wait)
        self.exchanges = 0  # answered exchanges (tests and logs)
        self.entered = 0  # epochs entered, all groups

    async def exchange(self, link: CommandLink) -> None:
        """One round trip (more for a first exchange, a new endpoint, or a position not yet
        learnt): add what changed, read the epoch's sums, apply the others' if they changed."""
        own = self._own()
        await self._place(link, own)
        due = epochs_due(self._epoch_clock(), self._period_s, self._lead_s)
        wants = [self._wanted(group, own) for group in self._groups]
        batches = [
            self._commands(g, want, due) for g, want in zip(self._groups, wants, strict=True)
        ]
        commands = [c for batch in batches for c in batch]
        try:
            replies = await link(commands)
        except BaseException:
            self._lose()
            raise
        changed = self._note_writes(wants, due)
        sums, at, counted = [], 0, self._counted()
        for group, batch in zip(self._groups, batches, strict=True):
            at += len(batch)
            if group is counted:
                sums.append(self._read(group, replies[at - 2], replies[at - 1], due[0]))
            else:
                sums.append(self._read(group, replies[at - 1], None, due[0]))
        await self._take(link, sums, changed)

    def _counted(self) -> _Group:
        """The group whose epoch's replicas this exchange counts: each in turn. Every replica
        enters every group's epochs, so one group's count is everyone's; counting one a turn
        spares the other groups' masters a command each exchange."""
        return self._groups[self.exchanges % len(self._groups)]

    async def _place(self, link: CommandLink, own: Mapping[str, int]) -> None:
        """Learn the positions of our endpoints that have something in flight and none known
        (HMGET); give those the index does not hold one (`_claim`)."""
        new: dict[int, list[str]] = {}
        for endpoint in own.keys() - self._where.keys():  # a set difference in C: mostly none
            if own[endpoint] > 0:
                new.setdefault(group_of(endpoint, len(self._groups)), []).append(endpoint)
        if not new:
            return
        order = sorted(new)
        held = await link([("HMGET", self._groups[g].keys.index, *new[g]) for g in order])
        missing: dict[int, list[str]] = {}
        for g, positions in zip(order, held, strict=True):
            for endpoint, position in zip(new[g], positions, strict=True):
                if position is None:
                    missing.setdefault(g, []).append(endpoint)
                else:
                    self._adopt(g, endpoint, int(position))
        if missing:
            await self._claim(link, missing)

    async def _claim(self, link: CommandLink, new: dict[int, list[str]]) -> None:
        """Give each endpoint the index does not hold the next position, atomically (one
        script call per group: a position is handed out only to an endpoint that has none, so
        positions stay 1..endpoints however many replicas meet the same new endpoints at once;
        reserving first, each replica's reservation left unused when another claimed the
        endpoint, and every later endpoint's position, and the sums, grew past them)."""
        order = sorted(new)
        replies = await link(
            [("EVAL", _CLAIM, 1, self._groups[g].keys.index, *new[g]) for g in order]
        )
        for g, positions in zip(order, replies, strict=True):
            for endpoint, position in zip(new[g], positions, strict=True):
                self._adopt(g, endpoint, int(position))

    def _adopt(self, g: int, endpoint: str, position: int) -> None:
        group = self._groups[g]
        group.learn(endpoint, position)
        group.endpoints.append(endpoint)
        group.positions.append(position)
        self._where[endpoint] = g

    @staticmethod
    def _wanted(group: _Group, own: Mapping[str, int]) -> Counts:
        """Our counts in the group, by position."""
        want = np.zeros(len(group.names), dtype=np.int64)
        if group.endpoints:
            counts = map(own.get, group.endpoints, repeat(0))  # in C: no bytecode per endpoint
            want[group.positions] = np.fromiter(counts, np.int64, len(group.endpoints))
        return np.maximum(want, 0, out=want)

    def _commands(self, group: _Group, want: Counts, due: tuple[int, ...]) -> list[Command]:
        """One group's commands: the changes to the epochs we are in, the whole counts to
        those we enter, then the read of the epoch of the time and its replicas."""
        keys, commands = group.keys, list[Command]()
        size = max(len(want), len(group.sent))
        changes = increments(grown(want, size) - grown(group.sent, size))
        for epoch in due:
            if epoch in group.joined:
                if changes[0]:
                    commands.append(_bitfield(keys.sums(epoch), changes))
            elif epoch not in group.barred:
                whole = increments(want)
                whole = whole if whole[0] else _CREATE  # nothing in flight: still create it
                commands += [
                    _bitfield(keys.sums(epoch), whole),
                    ("PEXPIRE", keys.sums(epoch), self._life_ms),
                    ("SADD", keys.joined(epoch), self._me),
                    ("PEXPIRE", keys.joined(epoch), self._life_ms),
                    ("PEXPIRE", keys.index, self._keep_ms),
                ]
        commands.append(("GET", keys.sums(due[0])))
        if group is not self._counted():
            return commands
        # The replicas listed once per epoch read (a twin under our id is said out loud),
        # counted otherwise.
        listing = "SMEMBERS" if due[0] != self._listed else "SCARD"
        return [*commands, (listing, keys.joined(due[0]))]

    def _note_writes(self, wants: list[Counts], due: tuple[int, ...]) -> bool:
        """Redis took the writes: every epoch due now holds `want` of ours (unless barred).
        Whether our counts changed."""
        changed = False
        for group, want in zip(self._groups, wants, strict=True):
            size = max(len(want), len(group.sent))
            if not np.array_equal(grown(want, size), grown(group.sent, size)):
                changed = True
            entering = {e for e in due if e not in group.joined and e not in group.barred}
            self.entered += len(entering)
            changed = changed or bool(entering)
            group.joined = {e for e in due if e not in group.barred}
            group.barred = {e for e in group.barred if e >= due[0]}
            group.sent = want
        return changed

    def _read(self, group: _Group, sums: bytes | None, joined: Any, epoch: int) -> Counts:
        """The others' counts in the epoch read; Redis lost the epoch if we are in it and it
        is gone (then it is barred, as after an error). `joined`: the epoch's replicas, or
        their number (None: not counted in this group this exchange)."""
        if joined is not None and not isinstance(joined, int):
            self._listed = epoch
            self._clashes(joined)
            joined = len(joined)
        if sums is None and epoch in group.joined:
            self._forget(group)
        if joined is not None:
            self.replicas_held = joined + (epoch not in group.joined)
        return others(decoded(sums), group.sent if epoch in group.joined else _empty())

    async def _take(self, link: CommandLink, sums: list[Counts], changed: bool) -> None:
        """Note the answer; hand the others' sum on if it changed."""
        self._answered_at = self._clock()
        self.exchanges += 1
        answers = [counts.tobytes() for counts in sums]
        if all(a == g.applied for a, g in zip(answers, self._groups, strict=True)):
            self.quiet = 0 if changed else self.quiet + 1
            return
        peers: dict[str, float] = {}
        for group, counts in zip(self._groups, sums, strict=True):
            part = named(counts, group.names)
            if part is None:
                await self._learn_index(link, group)
                part = named(counts, group.names) or {}
            peers.update(part)
        for group, answer in zip(self._groups, answers, strict=True):
            group.applied = answer
        self._on_peers(peers)
        self.quiet = 0

    async def _learn_index(self, link: CommandLink, group: _Group) -> None:
        """Read the group's index whole (a replica placed an endpoint we had not seen)."""
        (reply,) = await link([("HGETALL", group.keys.index)])
        pairs = (
            reply.items() if isinstance(reply, dict) else zip(reply[::2], reply[1::2], strict=True)
        )
        for name, position in pairs:
            if name:  # "" holds the last position handed out
                group.learn(name.decode(), int(position))

    def _clashes(self, members: Iterable[bytes]) -> None:
        """Another live process under our instance id: said out loud (`ReplicaIdentity`)."""
        head = self._identity.instance_id.encode() + b"\x1f"
        for member in members:
            if member.startswith(head) and member != self._me:
                self._identity.is_own(self._identity.instance_id, member[len(head) :].decode())

    def _lose(self) -> None:
        """A batch got no answer: whatever it wrote may or may not be in Redis."""
        for group in self._groups:
            self._forget(group)

    def _forget(self, group: _Group) -> None:
        """Bar the epochs we are in and learn our positions again (Redis may have lost them
        in a failover); our counts come back whole in the next epoch."""
        group.barred |= group.joined
        group.joined = set()
        group.sent = _empty()
        group.names, group.endpoints, group.positions = [], [], []
        self._where = {e: g for e, g in self._where.items() if self._groups[g] is not group}

    def expire(self) -> None:
        """No answer within `ttl_s`: the others' counts are unknown; drop them."""
        if self._answered_at is not None and self._clock() - self._answered_at > self._ttl_s:
            self._answered_at = None
            self.replicas_held = 0
            for group in self._groups:
                group.applied = None
            self._on_peers({})

    async def run(
        self, client: aioredis.Redis, interval_s: float, max_interval_s: float | None = None
    ) -> None:
        """Exchange forever on a connection of its own, every `interval_s` while something
        changes and up to `max_interval_s` while nothing does; after a Redis error, retry at
        the lone rate."""
        link = CommandLink(client)
        longest = interval_s if max_interval_s is None else max_interval_s
        try:
            while True:
                try:
                    await self.exchange(link)
                except (RedisError, OSError) as err:
                    logger.debug("in-flight sharing unavailable: %s", err)
                    self.replicas_held = 0
                    self.expire()
                wait = next_wait_s(
                    self.replicas_held, self.quiet, interval_s, longest, self._lead_s
                )
                await asyncio.sleep(wait)
        finally:
            await link.close()
