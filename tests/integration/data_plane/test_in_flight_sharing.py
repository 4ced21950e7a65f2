"""Replicas see each other's in-flight counts through a real redis-server (docs/data_plane.md,
"In-flight sharing"): the snapshots keep the sum right as counts change and replicas go
quiet, and a replica's work per exchange does not grow with the number of replicas."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any

import pytest
import redis.asyncio as aioredis

from contracts.redis_keys import RedisKeys
from data_plane.resilience.endpoint_load import LoadTracker
from data_plane.sync.command_link import CommandLink
from data_plane.sync.in_flight_sharing import REFRESH_S, InFlightSharing
from data_plane.sync.in_flight_snapshot import group_of
from data_plane.sync.replica_identity import ReplicaIdentity
from tests.support.waiting import eventually

INTERVAL_S = 0.02
TTL_S = 0.5
GROUPS = 3  # several calls per exchange, in one round trip


@pytest.fixture
async def link(redis_client: aioredis.Redis) -> AsyncIterator[CommandLink]:
    """The commands' own connection, as `InFlightSharing.run` makes one; closed after."""
    made = CommandLink(redis_client)
    yield made
    await made.close()


def _replica(
    keys: RedisKeys,
    name: str,
    clock: Callable[[], float] = time.monotonic,
    ttl_s: float = TTL_S,
    refresh_s: float = REFRESH_S,
) -> tuple[LoadTracker, InFlightSharing]:
    tracker = LoadTracker()
    sharing = InFlightSharing(
        keys,
        ReplicaIdentity(name, lambda: None, time.monotonic),
        tracker.in_flight_all,
        tracker.set_peers_in_flight,
        ttl_s,
        clock,
        groups=GROUPS,
        refresh_s=refresh_s,
    )
    return tracker, sharing


async def test_the_sum_follows_changes_and_a_quiet_replica_drops_out(
    redis_client: aioredis.Redis, redis_keys: RedisKeys, link: CommandLink
) -> None:
    (a, share_a), (b, share_b), (c, share_c) = (
        _replica(redis_keys, f"dp-{n}") for n in ("a", "b", "c")
    )
    for _ in range(3):
        a.acquire("cheap#0")
    b.acquire("cheap#0")
    b.acquire("other#0")
    for sharing in (share_a, share_b, share_c, share_a):
        await sharing.exchange(link)
    assert a.peers_in_flight() == {"cheap#0": 1.0, "other#0": 1.0}
    assert c.peers_in_flight() == {"cheap#0": 4.0, "other#0": 1.0}
    assert (a.load["cheap#0"], share_a.replicas_held) == (4.0, 3)

    b.release("cheap#0")  # b's snapshot changes: the sum changes by the difference
    await share_b.exchange(link)
    await share_a.exchange(link)
    assert a.peers_in_flight() == {"other#0": 1.0}

    # b goes quiet: after the TTL the next exchange anywhere takes its counts off.
    await asyncio.sleep(TTL_S + 0.1)
    await share_a.exchange(link)
    await share_c.exchange(link)
    assert c.peers_in_flight() == {"cheap#0": 3.0}
    assert share_c.replicas_held == 2

    for _ in range(3):
        a.release("cheap#0")
    await share_a.exchange(link)
    await share_c.exchange(link)
    assert c.peers_in_flight() == {}  # nothing in flight: no count left over


async def test_a_replica_that_gets_no_answer_drops_the_peers_after_the_ttl(
    redis_client: aioredis.Redis, redis_keys: RedisKeys, link: CommandLink
) -> None:
    now = [0.0]
    a, share_a = _replica(redis_keys, "dp-a", lambda: now[0])
    b, share_b = _replica(redis_keys, "dp-b")
    b.acquire("cheap#0")
    await share_b.exchange(link)
    await share_a.exchange(link)
    assert a.load["cheap#0"] == 1.0
    now[0] = TTL_S / 2
    share_a.expire()  # within the TTL of the last answer: kept
    assert a.load["cheap#0"] == 1.0
    now[0] = TTL_S * 2
    share_a.expire()
    assert a.load["cheap#0"] == 0.0
    await share_a.exchange(link)  # answered again: the same sum is applied again
    assert a.load["cheap#0"] == 1.0


class Counting:
    """Wraps a replica's callbacks: how often it took its own snapshot and applied the
    others', and how many entries it was handed in all."""

    def __init__(self, tracker: LoadTracker) -> None:
        self.tracker = tracker
        self.snapshots = self.applied = self.entries = 0

    def own(self) -> Mapping[str, int]:
        self.snapshots += 1
        return self.tracker.in_flight_all()

    def on_peers(self, peers: Mapping[str, float]) -> None:
        self.applied += 1
        self.entries += len(peers)
        self.tracker.set_peers_in_flight(peers)


async def test_work_per_exchange_does_not_grow_with_the_replicas(
    redis_client: aioredis.Redis, redis_keys: RedisKeys
) -> None:
    """With 12 replicas running, the one watched applies the others' counts at most once per
    exchange of its own (only when they changed), each time at most one entry per endpoint (a
    pub/sub exchange applied every message it heard: 11 per interval here, each a sum over
    every replica's snapshot)."""
    endpoints = [f"pair-{i}#0" for i in range(5)]
    watched = Counting(LoadTracker())
    sharing = InFlightSharing(
        redis_keys,
        ReplicaIdentity("dp-0", lambda: None, time.monotonic),
        watched.own,
        watched.on_peers,
        TTL_S,
        time.monotonic,
        groups=GROUPS,
    )
    others = [_replica(redis_keys, f"dp-{n}") for n in range(1, 12)]
    for tracker, _ in others:
        for endpoint in endpoints:
            tracker.acquire(endpoint)
    tasks = [asyncio.create_task(s.run(redis_client, INTERVAL_S)) for _, s in others]
    tasks.append(asyncio.create_task(sharing.run(redis_client, INTERVAL_S)))
    try:
        await eventually(lambda: sharing.exchanges >= 30, timeout_s=10, what="30 exchanges")
        assert watched.tracker.peers_in_flight() == {e: 11.0 for e in endpoints}
    finally:
        await _stop(tasks)
    assert 1 <= watched.applied <= sharing.exchanges
    assert watched.snapshots == sharing.exchanges
    assert watched.entries <= len(endpoints) * watched.applied


async def test_an_unchanged_snapshot_is_not_sent_and_an_unchanged_sum_not_applied(
    redis_client: aioredis.Redis, redis_keys: RedisKeys, link: CommandLink
) -> None:
    """An idle replica keeps its counts in the sum without sending them again, past the TTL;
    a change anywhere still reaches the others at their next exchange."""
    a, share_a = _replica(redis_keys, "dp-a")
    watched = Counting(LoadTracker())
    share_b = InFlightSharing(
        redis_keys,
        ReplicaIdentity("dp-b", lambda: None, time.monotonic),
        watched.own,
        watched.on_peers,
        TTL_S,
        time.monotonic,
        groups=GROUPS,
    )
    a.acquire("cheap#0")
    watched.tracker.acquire("other#0")
    for _ in range(3):  # the first exchanges, and each taking the other's endpoints in
        for sharing in (share_a, share_b):  # its catalog (one write more each)
            await sharing.exchange(link)
    sent = (share_a.snapshots_sent, share_b.snapshots_sent, watched.applied)
    assert sent <= (2, 2, 2)
    snapshots = await _held(redis_client, redis_keys)

    for _ in range(8):  # twice the TTL with nothing changed anywhere
        await asyncio.sleep(TTL_S / 4)
        for sharing in (share_a, share_b):
            await sharing.exchange(link)
    assert (share_a.snapshots_sent, share_b.snapshots_sent, watched.applied) == sent
    assert await _held(redis_client, redis_keys) == snapshots  # not rewritten
    assert watched.tracker.peers_in_flight() == {"cheap#0": 1.0}  # a is still counted
    assert a.peers_in_flight() == {"other#0": 1.0}

    a.acquire("cheap#0")  # a change: sent at a's next exchange, applied at b's
    await share_a.exchange(link)
    await share_b.exchange(link)
    assert (share_a.snapshots_sent, watched.applied) == (sent[0] + 1, sent[2] + 1)
    assert watched.tracker.peers_in_flight() == {"cheap#0": 2.0}
    watched.tracker.release("other#0")  # b's own change alone: sent, and the others' sum
    await share_b.exchange(link)  # (which never held b's own counts) is not applied again
    assert (share_b.snapshots_sent, watched.applied, share_b.quiet) == (
        sent[1] + 1,
        sent[2] + 1,
        0,
    )
    assert watched.tracker.peers_in_flight() == {"cheap#0": 2.0}


async def test_a_replica_whose_snapshot_expired_sends_it_whole_again(
    redis_client: aioredis.Redis, redis_keys: RedisKeys, link: CommandLink
) -> None:
    """A replica silent past the TTL (a stalled loop) is taken off the sum; its next exchange,
    though its counts did not change, puts them back."""
    (a, share_a), (b, share_b) = _replica(redis_keys, "dp-a"), _replica(redis_keys, "dp-b")
    a.acquire("cheap#0")
    await share_a.exchange(link)
    await asyncio.sleep(TTL_S + 0.1)
    await share_b.exchange(link)  # takes a's snapshot off
    assert b.peers_in_flight() == {}
    await share_a.exchange(link)  # unchanged: sent empty, told to send it whole, does
    assert share_a.snapshots_sent == 2
    await share_b.exchange(link)
    assert b.peers_in_flight() == {"cheap#0": 1.0}


async def test_a_lone_replica_slows_down_and_speeds_up_when_another_appears(
    redis_client: aioredis.Redis, redis_keys: RedisKeys, link: CommandLink
) -> None:
    (_, alone), (_, other) = _replica(redis_keys, "dp-a"), _replica(redis_keys, "dp-b")
    await alone.exchange(link)
    assert alone.replicas_held == 1  # alone: the loop waits TTL / 2 (next_wait_s)
    await other.exchange(link)
    await alone.exchange(link)
    assert (alone.replicas_held, other.replicas_held) == (2, 2)


async def test_two_processes_under_one_id_are_two_replicas_and_a_clash(
    redis_client: aioredis.Redis, redis_keys: RedisKeys, link: CommandLink
) -> None:
    """Two processes left on one INSTANCE_ID (docs/data_plane.md, "Replica identity"): each
    counts the other's requests, and each notices the other process."""
    clashes = {"first": 0, "second": 0}
    made = []
    for which in ("first", "second"):
        tracker = LoadTracker()

        def count(which: str = which) -> None:
            clashes[which] += 1

        identity = ReplicaIdentity("dp-0", count, time.monotonic)
        sharing = InFlightSharing(
            redis_keys,
            identity,
            tracker.in_flight_all,
            tracker.set_peers_in_flight,
            TTL_S,
            time.monotonic,
            groups=GROUPS,
        )
        made.append((tracker, sharing, identity))
    (first, share_first, id_first), (second, share_second, _) = made
    first.acquire("cheap#0")
    second.acquire("cheap#0")
    second.acquire("cheap#0")
    for sharing in (share_first, share_second, share_first):
        await sharing.exchange(link)
    assert first.peers_in_flight() == {"cheap#0": 2.0}  # not dropped as our own echo
    assert second.peers_in_flight() == {"cheap#0": 1.0}
    assert clashes["first"] >= 1
    assert clashes["second"] >= 1
    assert id_first.warnings()


async def test_a_lost_update_heals_at_the_next_full_refresh(
    redis_client: aioredis.Redis, redis_keys: RedisKeys, link: CommandLink
) -> None:
    """Redis loses a replica's last update (a failover to a replica that lagged): the others
    see the old count until the replica's next full refresh, then the right one again; an
    update that arrives twice changes nothing."""
    now = [0.0]
    a, me = LoadTracker(), ReplicaIdentity("dp-a", lambda: None, time.monotonic)
    share_a = InFlightSharing(
        redis_keys, me, a.in_flight_all, a.set_peers_in_flight, TTL_S, lambda: now[0], groups=GROUPS
    )
    b, share_b = _replica(redis_keys, "dp-b")
    a.acquire("cheap#0")
    await share_a.exchange(link)  # the first exchange sends everything
    keys = redis_keys.in_flight_group(group_of("cheap#0", GROUPS), GROUPS)
    mine = keys.snapshot(f"dp-a\x1f{me.process}")
    before = await redis_client.get(mine)
    assert isinstance(before, bytes)
    a.acquire("cheap#0")
    a.acquire("other#0")
    await share_a.exchange(link)  # a change: cheap 2, other 1
    assert (share_a.full_sent, share_a.snapshots_sent) == (1, 2)
    await redis_client.set(mine, before, px=int(TTL_S * 1000))  # as Redis held it before
    await share_b.exchange(link)
    assert b.peers_in_flight()["cheap#0"] == 1.0  # the lost update shows
    await share_a.exchange(link)  # nothing changed at a: nothing sent, nothing healed yet
    assert share_a.full_sent == 1
    now[0] = 5.0  # the default refresh_s later
    await share_a.exchange(link)
    assert share_a.full_sent == 2
    await share_b.exchange(link)
    assert b.peers_in_flight() == {"cheap#0": 2.0, "other#0": 1.0}

    held = await redis_client.get(mine)
    assert isinstance(held, bytes)
    for _ in range(2):  # the same update twice (a reply lost, the write sent again)
        await redis_client.set(mine, held, px=int(TTL_S * 1000))
    await share_b.exchange(link)
    assert b.peers_in_flight() == {"cheap#0": 2.0, "other#0": 1.0}


async def _held(client: aioredis.Redis, keys: RedisKeys) -> list[dict[Any, Any]]:
    """Every group's snapshots as Redis holds them, by replica."""
    held = []
    for g in range(GROUPS):
        group = keys.in_flight_group(g, GROUPS)
        members = sorted(await client.smembers(group.members))
        held.append({m: await client.get(group.snapshot(m)) for m in members})
    return held


async def _stop(tasks: list[asyncio.Task[None]]) -> None:
    """Cancel until done: redis-py can swallow a cancel on Python 3.11 (see data_plane.app)."""
    while pending := [t for t in tasks if not t.done()]:
        for task in pending:
            task.cancel()
        await asyncio.wait(pending, timeout=0.2)


async def _commands_per_round(
    client: aioredis.Redis, keys: RedisKeys, link: CommandLink, endpoints: int
) -> dict[str, int]:
    """Commands Redis ran (INFO commandstats) for one round of 4 replicas' exchanges, each
    with a changed count, after two rounds that made every replica known to every other."""
    names = [f"pair-{i}#0" for i in range(endpoints)]
    # A TTL and refresh no stall of a loaded machine outlasts (an expired snapshot, or a
    # full refresh, would write again): the count is the exchange's own.
    replicas = [_replica(keys, f"dp-{i}", ttl_s=60.0, refresh_s=600.0) for i in range(4)]
    for tracker, _ in replicas:
        for name in names:
            tracker.acquire(name)  # every replica's catalog is every endpoint
    for _ in range(2):
        for _, sharing in replicas:
            await sharing.exchange(link)
    await client.config_resetstat()
    for i, (tracker, sharing) in enumerate(replicas):
        tracker.acquire(names[i % endpoints])
        await sharing.exchange(link)
    stats = await client.info("commandstats")
    calls = {name.removeprefix("cmdstat_"): int(row["calls"]) for name, row in stats.items()}
    assert replicas[-1][0].peers_in_flight()[names[1]] == 4.0  # 3 others, one of them +1
    return {name: n for name, n in calls.items() if name not in ("info", "config|resetstat")}


async def test_an_exchange_is_four_plain_commands_per_group_whatever_the_endpoints(
    redis_client: aioredis.Redis, redis_keys: RedisKeys, link: CommandLink
) -> None:
    """Redis does no work per endpoint: an exchange writes one snapshot per group (or renews
    an unchanged one's expiry), counts the group's replicas and reads the others' with one
    MGET. The Lua script it replaced ran `evalsha` with an HMGET/HSET per changed count and
    re-encoded the sum inside it (inner calls counted too, more with more endpoints)."""
    for endpoints in (5, 200):
        keys = RedisKeys(f"{redis_keys.prefix}-{endpoints}")
        calls = await _commands_per_round(redis_client, keys, link, endpoints)
        written = calls.pop("set", 0) + calls.pop("pexpire", 0)  # a snapshot, or its expiry
        assert written == 4 * GROUPS, (endpoints, calls)
        assert calls == {"sadd": 4 * GROUPS, "scard": 4 * GROUPS, "mget": 4 * GROUPS}, endpoints
