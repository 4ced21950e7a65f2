"""Replicas share their in-flight counts per endpoint, so load between scrapes is not herded
(docs/data_plane.md, "In-flight sharing").

Endpoints are spread over groups, each with keys of its own under its own hash tag
(`in_flight_snapshot.py`): a Redis Cluster spreads the groups over its slots. Per group, each
replica writes ONE key, its snapshot (every count it holds, compactly encoded), with the TTL as
its expiry, and reads the others' snapshots with one MGET; every group's commands go in one
round trip on a standalone Redis or Sentinel's master. A snapshot is written only when it
changed (or at a full refresh every `refresh_s`); an unchanged one only has its expiry renewed,
and if Redis no longer holds it (it went quiet past the TTL, or Redis lost its data) it is
written again at once. Redis does no work per endpoint: the replica sums the others'
snapshots itself (as one matrix, `in_flight_snapshot.sum_snapshots`) and hands the sum to the
load tracker. After an exchange that changed nothing (our snapshots and every other one as
before), the wait doubles up to `max_interval_s`; any change brings it back to `interval_s`.
A replica that hears no other waits `ttl_s` / 2, enough to stay visible. No Redis I/O on the
request path; with Redis unreachable, the peers' counts are dropped `ttl_s` after the last
answer, and each replica falls back to its own in-flight plus the scrape.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import redis.asyncio as aioredis
from redis.exceptions import RedisError

from contracts.redis_keys import InFlightKeys, RedisKeys
from data_plane.sync.command_link import Command, CommandLink, Packed
from data_plane.sync.in_flight_snapshot import (
    Catalog,
    encode,
    fingerprints,
    group_of,
    next_wait_s,
    sum_snapshots,
)
from data_plane.sync.replica_identity import ReplicaIdentity

GROUPS = 1  # IN_FLIGHT_SHARE_GROUPS's default on a standalone Redis or Sentinel
CLUSTER_GROUPS = 3  # ...and on a cluster (one per master of the smallest cluster)
REFRESH_S = 5.0  # the default IN_FLIGHT_SHARE_REFRESH_S

logger = logging.getLogger(__name__)


@dataclass
class _Group:
    """What this replica knows of one endpoint group."""

    keys: InFlightKeys
    ever: set[str] = field(default_factory=set)  # ever in flight here or in a catalog read
    catalog: Catalog = field(default_factory=lambda: Catalog.of(()))
    catalog_sent: bool = False  # Redis took `catalog` (since the last error)
    sent: bytes | None = None  # the snapshot Redis last took
    others: list[bytes] = field(default_factory=list)  # the other replicas, as last listed
    listed: bool = False  # `others` came from a listing (else: list them at the next exchange)
    read: Packed | None = None  # the MGET of `read_of`'s snapshots, packed once
    read_of: tuple[bytes, ...] = ()
    twins: list[bytes] = field(default_factory=list)  # others under our instance id
    named: set[bytes] = field(default_factory=set)  # catalogs the others' snapshots name
    dead_since: dict[bytes, float] = field(default_factory=dict)  # listed, no snapshot
    prune: list[bytes] = field(default_factory=list)  # taken off the list next exchange
    applied: tuple[tuple[bytes, bytes], ...] | None = None  # the others' snapshots applied


@dataclass
class _Read:
    """One group's answer: whether our snapshot was still held, the replicas listed, and the
    snapshots read (None: expired)."""

    lost: bool
    members: set[bytes] | None  # None: the count differed from ours; listed in a catch-up
    listed: bool  # `members` is a listing (else: the count matched, the list is as known)
    snapshots: dict[bytes, bytes | None]


class InFlightSharing:
    """Exchanges `own()` for the others' sum every interval; applies it through `on_peers`.

    A snapshot is written only when it changed (all of them every `refresh_s`, or when Redis
    lost ours), and the others' snapshots, when all are as last applied with our counts
    unchanged, are not applied again: an idle fleet costs each replica one round trip per
    exchange and Redis a few commands."""

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
    ) -> None:
        self._groups = [_Group(keys.in_flight_group(g, groups)) for g in range(groups)]
        self._identity, self._own, self._on_peers = identity, own, on_peers
        self._ttl_s, self._clock, self._refresh_s = ttl_s, clock, refresh_s
        self._me = f"{identity.instance_id}\x1f{identity.process}".encode()
        self._ttl_ms = int(ttl_s * 1000)
        self._keep_s = max(4 * ttl_s, 2 * refresh_s + ttl_s)  # the list's and catalogs' life
        self._known: set[str] = set()  # every group's `ever`
        self._catalogs: dict[bytes, Catalog] = {}  # fingerprint -> catalog, as read
        self._in_step = False  # Redis holds what we last sent (False at first, after errors)
        self._refresh_at = float("-inf")  # the next full refresh, on `clock`
        self._answered_at: float | None = None  # clock time of the last answer
        self.replicas_held = 0  # replicas in the last answer, this one included
        self.quiet = 0  # exchanges in a row that changed nothing (they lengthen the wait)
        self.exchanges = 0  # answered exchanges (tests and logs)
        self.snapshots_sent = 0  # answered exchanges that wrote a snapshot
        self.full_sent = 0  # answered exchanges that wrote everything

    async def exchange(self, link: CommandLink) -> None:
        """One round trip (more only when Redis lost our snapshot, or a replica or catalog
        is new to us): write what changed, read the others, apply their sum if it changed."""
        snapshots = self._encode(self._own())
        changed = any(s != g.sent for s, g in zip(snapshots, self._groups, strict=True))
        full = not self._in_step or self._clock() >= self._refresh_at
        self._in_step = False  # until answered: after an error Redis may hold either
        reads = await self._send(link, snapshots, full)
        if not full and any(read.lost for read in reads):
            full = True  # Redis no longer holds us: send everything, now
            reads = await self._send(link, snapshots, True)
        await self._read_new(link, reads)
        await self._learn_catalogs(link, reads)
        self._in_step = True
        for group, snapshot in zip(self._groups, snapshots, strict=True):
            group.sent, group.catalog_sent = snapshot, True
        if full:
            self._refresh_at = self._clock() + self._refresh_s
            self.full_sent += 1
        if full or changed:
            self.snapshots_sent += 1
        self._take(reads, changed)

    def _encode(self, own: Mapping[str, int]) -> list[bytes]:
        """Our snapshot of each group; a group whose endpoints grew gets a new catalog."""
        grown: set[int] = set()
        for endpoint in own.keys() - self._known:  # a set difference in C: mostly none
            if own[endpoint] > 0:
                g = group_of(endpoint, len(self._groups))
                self._groups[g].ever.add(endpoint)
                self._known.add(endpoint)
                grown.add(g)
        for g in grown:
            group = self._groups[g]
            group.catalog, group.catalog_sent = Catalog.of(group.ever), False
        return [encode(group.catalog, own) for group in self._groups]

    def _commands(self, group: _Group, snapshot: bytes, full: bool) -> list[Command]:
        """One group's commands: the write (or the expiry renewed), the list, the reads."""
        keys, me, keep_ms = group.keys, self._me, int(self._keep_s * 1000)
        commands: list[Command] = []
        if full or snapshot != group.sent:
            if full or not group.catalog_sent:
                fingerprint = group.catalog.fingerprint
                commands.append(
                    ("SET", keys.catalog(fingerprint), group.catalog.text, "PX", keep_ms)
                )
            commands.append(("SET", keys.snapshot(me), snapshot, "PX", self._ttl_ms))
        else:
            commands.append(("PEXPIRE", keys.snapshot(me), self._ttl_ms))
        commands.append(("SADD", keys.members, me))
        if full:
            commands.append(("PEXPIRE", keys.members, keep_ms))
        if group.prune:
            commands.append(("SREM", keys.members, *group.prune))
        # The count alone while it matches ours (a listing is a reply element per replica).
        commands.append(("SMEMBERS" if full or not group.listed else "SCARD", keys.members))
        if group.others:
            others = tuple(group.others)
            if group.read is None or group.read_of != others:
                group.read = Packed.of("MGET", *(keys.snapshot(m) for m in others))
                group.read_of = others
            commands.append(group.read)
        return commands

    async def _send(self, link: CommandLink, snapshots: list[bytes], full: bool) -> list[_Read]:
        """Every group's commands in one batch; each group's answer."""
        batches = [self._commands(g, s, full) for g, s in zip(self._groups, snapshots, strict=True)]
        replies = await link([c for batch in batches for c in batch])
        reads, at = [], 0
        for group, batch, snapshot in zip(self._groups, batches, snapshots, strict=True):
            mine = replies[at : at + len(batch)]
            at += len(batch)
            lost = not full and snapshot == group.sent and mine[0] == 0  # PEXPIRE: not held
            read, listing = (mine[-1], mine[-2]) if group.others else ([], mine[-1])
            if isinstance(listing, int):  # SCARD: the others and us, unless one came or went
                members = {*group.others, self._me} if listing == len(group.others) + 1 else None
            else:
                members = set(listing)
            listed = not isinstance(listing, int)
            reads.append(_Read(lost, members, listed, dict(zip(group.others, read, strict=True))))
        return reads

    async def _list(self, link: CommandLink, reads: list[_Read]) -> None:
        """List the groups whose count of replicas changed, in one more round trip."""
        unlisted = [(g, r) for g, r in zip(self._groups, reads, strict=True) if r.members is None]
        if unlisted:
            listings = await link([("SMEMBERS", g.keys.members) for g, _ in unlisted])
            for (_, read), listing in zip(unlisted, listings, strict=True):
                read.members, read.listed = set(listing), True

    async def _read_new(self, link: CommandLink, reads: list[_Read]) -> None:
        """Read the snapshots of replicas listed for the first time, in one more round trip."""
        await self._list(link, reads)
        new = [sorted((r.members or set()) - r.snapshots.keys() - {self._me}) for r in reads]
        commands: list[Command] = [
            ("MGET", *(g.keys.snapshot(m) for m in names))
            for g, names in zip(self._groups, new, strict=True)
            if names
        ]
        if not commands:
            return
        replies = iter(await link(commands))
        for read, names in zip(reads, new, strict=True):
            if names:
                read.snapshots.update(zip(names, next(replies), strict=True))

    async def _learn_catalogs(self, link: CommandLink, reads: list[_Read]) -> None:
        """Fetch the catalogs the snapshots name that we do not know (a new endpoint
        somewhere); forget those no snapshot names any more."""
        named = [fingerprints(r.snapshots.values()) for r in reads]
        for group, names in zip(self._groups, named, strict=True):
            group.named = names
        self._catalogs = {f: c for f, c in self._catalogs.items() if any(f in n for n in named)}
        wanted = [sorted(n - self._catalogs.keys()) for n in named]
        commands: list[Command] = [
            ("MGET", *(g.keys.catalog(f) for f in fs))
            for g, fs in zip(self._groups, wanted, strict=True)
            if fs
        ]
        if not commands:
            return
        replies = iter(await link(commands))
        for fs in (fs for fs in wanted if fs):
            for fingerprint, text in zip(fs, next(replies), strict=True):
                catalog = Catalog.parse(fingerprint, text)
                if catalog is not None:
                    self._catalogs[fingerprint] = catalog

    def _take(self, reads: list[_Read], changed: bool) -> None:
        """Note the answers; hand the others' sum on if it changed."""
        now = self._clock()
        self._answered_at = now
        self.exchanges += 1
        answers = [
            self._note(group, read, now) for group, read in zip(self._groups, reads, strict=True)
        ]
        self._clashes(self._groups[0], reads[0])
        self.replicas_held = 1 + max(len(answer) for answer in answers)
        if any(a != g.applied for a, g in zip(answers, self._groups, strict=True)):
            peers: dict[str, float] = {}
            for group, answer in zip(self._groups, answers, strict=True):
                group.applied = answer
                peers.update(sum_snapshots((s for _, s in answer), self._catalogs))
            self._on_peers(peers)
            self.quiet = 0
        elif changed:
            self.quiet = 0
        else:
            self.quiet += 1

    def _note(self, group: _Group, read: _Read, now: float) -> tuple[tuple[bytes, bytes], ...]:
        """The group's live snapshots but ours, by replica; the list for the next exchange,
        and the replicas silent past the list's life, to be taken off it."""
        if read.listed or not group.listed:
            group.others, group.listed = sorted((read.members or set()) - {self._me}), True
            head = self._identity.instance_id.encode() + b"\x1f"
            group.twins = [m for m in group.others if m.startswith(head)]
        group.prune = []
        get = read.snapshots.get
        live = [(m, s) for m in group.others if (s := get(m)) is not None]
        if len(live) < len(group.others) or group.dead_since:
            self._note_dead(group, read, now)
        self._adopt(group)
        return tuple(live)

    def _note_dead(self, group: _Group, read: _Read, now: float) -> None:
        """Replicas listed without a snapshot: taken off the list once silent past its life."""
        for member in group.others:
            if read.snapshots.get(member) is not None:
                group.dead_since.pop(member, None)
            elif now - group.dead_since.setdefault(member, now) >= self._keep_s:
                group.prune.append(member)
                del group.dead_since[member]
        if group.prune:  # off the list at the next exchange: no longer read, nor counted
            group.others = [m for m in group.others if m not in group.prune]

    def _adopt(self, group: _Group) -> None:
        """Take the endpoints of the others' catalogs into ours: the fleet converges on one
        catalog per group, whose snapshots sum as one matrix (a catalog per replica would be
        summed one by one)."""
        ours, union = group.catalog.fingerprint, group.ever
        for fingerprint in group.named:
            catalog = self._catalogs.get(fingerprint)
            if catalog is not None and fingerprint != ours:
                union = union.union(catalog.endpoints)
        if len(union) > len(group.ever):
            group.ever = union
            self._known.update(union)
            group.catalog, group.catalog_sent = Catalog.of(union), False

    def _clashes(self, group: _Group, read: _Read) -> None:
        """Another live process under our instance id: said out loud (`ReplicaIdentity`)."""
        instance = self._identity.instance_id
        for twin in group.twins:
            if read.snapshots.get(twin) is not None:
                self._identity.is_own(instance, twin[len(instance.encode()) + 1 :].decode())

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
        the lone rate (counts expire)."""
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
                wait = next_wait_s(self.replicas_held, self.quiet, interval_s, longest, self._ttl_s)
                await asyncio.sleep(wait)
        finally:
            await link.close()
