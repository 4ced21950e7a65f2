"""Replicas see each other's in-flight counts through sums a real redis-server keeps
(docs/data_plane.md, "In-flight sharing"): deltas from many replicas sum exactly whatever
their order, an epoch entered while others add deltas loses none, a replica that dies without
cleaning up is out of the sums within the TTL, and Redis's work per exchange does not grow
with the replicas. The epochs follow a clock the test moves (`epoch_clock`), so no test
depends on how fast the machine runs."""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any

import pytest
import redis.asyncio as aioredis

from contracts.redis_keys import RedisKeys
from data_plane.resilience.endpoint_load import LoadTracker
from data_plane.sync.command_link import Command, CommandLink, Packed
from data_plane.sync.in_flight_epochs import epoch_lengths
from data_plane.sync.in_flight_sharing import InFlightSharing
from data_plane.sync.replica_identity import ReplicaIdentity

# The epochs follow the test's own clock; Redis expires the keys on its wall clock (PEXPIRE of
# the TTL). At 1 s, a round of eight exchanges beside a second suite (load 30) outlived the
# sums' key and the sums read 0: long enough that only the test's clock moves the epochs.
TTL_S = 60.0
PERIOD_S, LEAD_S = epoch_lengths(TTL_S)
GROUPS = 3  # several groups per exchange, in one round trip


class EpochClock:
    """The clock the replicas' epochs follow, moved by the test; starts mid-epoch."""

    def __init__(self) -> None:
        self.now = 1000 * PERIOD_S + PERIOD_S / 4

    def __call__(self) -> float:
        return self.now

    def to_lead(self) -> None:
        """Into the lead before the next epoch (replicas enter it as well)."""
        epoch = self.now // PERIOD_S
        self.now = (epoch + 1) * PERIOD_S - LEAD_S / 2

    def to_next(self) -> None:
        """A quarter into the next epoch (read from now on)."""
        epoch = self.now // PERIOD_S
        self.now = (epoch + 1) * PERIOD_S + PERIOD_S / 4


@pytest.fixture
async def links(redis_client: aioredis.Redis) -> AsyncIterator[list[CommandLink]]:
    """Eight connections of their own, as `InFlightSharing.run` makes one each; closed after."""
    made = [CommandLink(redis_client) for _ in range(8)]
    yield made
    for link in made:
        await link.close()


def _replica(
    keys: RedisKeys,
    name: str,
    epochs: Callable[[], float],
    groups: int = GROUPS,
    clock: Callable[[], float] = time.monotonic,
) -> tuple[LoadTracker, InFlightSharing]:
    tracker = LoadTracker()
    sharing = InFlightSharing(
        keys,
        ReplicaIdentity(name, lambda: None, time.monotonic),
        tracker.in_flight_all,
        tracker.set_peers_in_flight,
        TTL_S,
        clock,
        groups=groups,
        epoch_clock=epochs,
    )
    return tracker, sharing


async def _all_at_once(
    replicas: Sequence[tuple[LoadTracker, InFlightSharing]], links: Sequence[CommandLink]
) -> None:
    """One exchange by each replica, all in flight together, each on its own connection."""
    await asyncio.gather(*(s.exchange(links[i]) for i, (_, s) in enumerate(replicas)))


def _set(tracker: LoadTracker, endpoint: str, count: int) -> None:
    while tracker.in_flight_all().get(endpoint, 0) < count:
        tracker.acquire(endpoint)
    while tracker.in_flight_all().get(endpoint, 0) > count:
        tracker.release(endpoint)


def _others(trackers: Sequence[LoadTracker], me: int) -> dict[str, float]:
    """The truth: every other replica's counts, summed, positive ones only."""
    total: dict[str, float] = {}
    for i, tracker in enumerate(trackers):
        if i != me:
            for endpoint, n in tracker.in_flight_all().items():
                total[endpoint] = total.get(endpoint, 0.0) + n
    return {e: n for e, n in total.items() if n > 0}


async def test_the_sum_follows_changes_and_a_replica_that_died_drops_out_within_the_ttl(
    redis_keys: RedisKeys, links: list[CommandLink]
) -> None:
    clock = EpochClock()
    (a, share_a), (b, share_b), (c, share_c) = (
        _replica(redis_keys, f"dp-{n}", clock) for n in ("a", "b", "c")
    )
    _set(a, "cheap#0", 3)
    _set(b, "cheap#0", 1)
    _set(b, "other#0", 1)
    for sharing, link in ((share_a, links[0]), (share_b, links[1]), (share_c, links[2])):
        await sharing.exchange(link)
    await share_a.exchange(links[0])
    assert a.peers_in_flight() == {"cheap#0": 1.0, "other#0": 1.0}
    assert c.peers_in_flight() == {"cheap#0": 4.0, "other#0": 1.0}
    assert (a.load["cheap#0"], share_a.replicas_held) == (4.0, 3)

    _set(b, "cheap#0", 0)  # b adds -1: the sum changes by the difference
    await share_b.exchange(links[1])
    await share_a.exchange(links[0])
    assert a.peers_in_flight() == {"other#0": 1.0}

    # b dies without a word after one more exchange in the lead (so it is in the next epoch
    # too): its counts stay through that epoch and are gone in the one after, a TTL after
    # its last write at most.
    clock.to_lead()
    await share_b.exchange(links[1])
    dead_at = clock.now
    for sharing, link in ((share_a, links[0]), (share_c, links[2])):
        await sharing.exchange(link)
    clock.to_next()
    await share_a.exchange(links[0])
    await share_c.exchange(links[2])
    assert c.peers_in_flight() == {"cheap#0": 3.0, "other#0": 1.0}  # b's epoch: still counted
    clock.now = dead_at + TTL_S
    await share_a.exchange(links[0])
    await share_c.exchange(links[2])
    assert c.peers_in_flight() == {"cheap#0": 3.0}
    assert share_c.replicas_held == 2

    _set(a, "cheap#0", 0)
    await share_a.exchange(links[0])
    await share_c.exchange(links[2])
    assert c.peers_in_flight() == {}  # nothing in flight: no count left over


async def test_concurrent_deltas_from_many_replicas_sum_exactly(
    redis_client: aioredis.Redis, redis_keys: RedisKeys, links: list[CommandLink]
) -> None:
    """Eight replicas on connections of their own change counts and exchange at once, round
    after round, through an epoch change; then each holds exactly the others' counts, and
    Redis's sums are exactly everyone's."""
    clock, rng = EpochClock(), random.Random(34)
    replicas = [_replica(redis_keys, f"dp-{i}", clock) for i in range(8)]
    endpoints = [f"e{i}#0" for i in range(40)]
    for round_ in range(30):
        if round_ == 10:
            clock.to_lead()
        if round_ == 20:
            clock.to_next()
        for tracker, _ in replicas:
            for endpoint in rng.sample(endpoints, 8):
                _set(tracker, endpoint, rng.randrange(0, 5))
        await _all_at_once(replicas, links)
    await _all_at_once(replicas, links)
    trackers = [t for t, _ in replicas]
    for i, tracker in enumerate(trackers):
        assert tracker.peers_in_flight() == _others(trackers, i), i
    assert await _redis_sums(redis_client, redis_keys, clock) == _others(trackers, -1)


def _raw(value: object) -> bytes:
    """A reply of a client that does not decode (None: a missing key, no bytes)."""
    assert value is None or isinstance(value, bytes), value
    return value or b""


async def _redis_sums(
    client: aioredis.Redis, keys: RedisKeys, clock: EpochClock
) -> dict[str, float]:
    """Everyone's counts, as the epoch of `clock` holds them in Redis (read apart from the
    replicas' code: the index and the i32 big-endian sums)."""
    epoch = int(clock.now // PERIOD_S)
    total: dict[str, float] = {}
    for g in range(GROUPS):
        group = keys.in_flight_group(g, GROUPS)
        index = await client.hgetall(group.index)
        sums = _raw(await client.get(group.sums(epoch)))
        for name, position in index.items():
            at = int(position) * 4
            if name and at < len(sums):
                n = int.from_bytes(sums[at : at + 4], "big", signed=True)
                if n:
                    total[_raw(name).decode()] = float(n)
    return total


async def test_entering_an_epoch_while_others_add_deltas_loses_nothing(
    redis_client: aioredis.Redis, redis_keys: RedisKeys, links: list[CommandLink]
) -> None:
    """Half the replicas enter the next epoch (their whole counts) in the same instant as the
    other half add their changes to it and to the current one, each on its own connection:
    both epochs' sums come out exact."""
    clock = EpochClock()
    replicas = [_replica(redis_keys, f"dp-{i}", clock, groups=1) for i in range(8)]
    for i, (tracker, _) in enumerate(replicas):
        _set(tracker, "hot#0", i + 1)
    await _all_at_once(replicas, links)
    clock.to_lead()
    await asyncio.gather(*(s.exchange(links[i]) for i, (_, s) in enumerate(replicas[:4])))
    for i, (tracker, _) in enumerate(replicas):
        _set(tracker, "hot#0", 2 * (i + 1))  # everyone's count doubles
    await _all_at_once(replicas, links)
    group = redis_keys.in_flight_group(0, 1)
    epoch = int(clock.now // PERIOD_S)
    position = int(await redis_client.hget(group.index, "hot#0") or -1)
    for e in (epoch, epoch + 1):
        sums = _raw(await redis_client.get(group.sums(e)))
        held = int.from_bytes(sums[4 * position : 4 * position + 4], "big", signed=True)
        assert held == 2 * sum(range(1, 9)), e


class Unanswered:
    """A link whose batch reaches Redis but whose answer is lost (a connection cut after
    the write): the replica cannot know whether its changes landed."""

    def __init__(self, link: CommandLink) -> None:
        self.link = link

    async def __call__(self, commands: Sequence[Command]) -> list[Any]:
        await self.link(commands)
        raise ConnectionError("the answer was lost")


async def test_a_write_without_answer_is_never_counted_twice(
    redis_keys: RedisKeys, links: list[CommandLink]
) -> None:
    """A replica whose write got no answer bars that epoch (it would add its counts again
    on top of a write that may have landed): the others see its counts once, and from the
    next epoch the sums are exact again."""
    clock = EpochClock()
    (a, share_a), (b, share_b) = (_replica(redis_keys, f"dp-{n}", clock) for n in "ab")
    _set(a, "cheap#0", 2)
    await share_a.exchange(links[0])
    _set(a, "cheap#0", 5)
    with pytest.raises(ConnectionError):
        await share_a.exchange(Unanswered(links[0]))  # type: ignore[arg-type]  # a fake link
    await share_a.exchange(links[0])
    await share_b.exchange(links[1])
    assert b.peers_in_flight() == {"cheap#0": 5.0}  # landed once, not added again
    _set(a, "cheap#0", 1)  # a's change cannot go to the barred epoch...
    await share_a.exchange(links[0])
    await share_b.exchange(links[1])
    assert b.peers_in_flight() == {"cheap#0": 5.0}  # ...so the others hear it late
    clock.to_lead()
    await share_a.exchange(links[0])  # enters the next epoch whole
    clock.to_next()
    await share_a.exchange(links[0])
    await share_b.exchange(links[1])
    assert b.peers_in_flight() == {"cheap#0": 1.0}
    assert a.peers_in_flight() == {}


async def _commands_per_round(
    client: aioredis.Redis, keys: RedisKeys, links: list[CommandLink], replicas: int
) -> dict[str, int]:
    """Redis's commands in one round of exchanges by every replica, in steady state (after
    every replica placed its endpoints and entered the epoch)."""
    clock = EpochClock()
    fleet = [_replica(keys, f"dp-{i}", clock) for i in range(replicas)]
    names = [f"e{i}#0" for i in range(200)]
    for tracker, _ in fleet:
        for name in names:
            _set(tracker, name, 1)
    for _ in range(2):
        for i, (_, sharing) in enumerate(fleet):
            await sharing.exchange(links[i % len(links)])
    await client.config_resetstat()
    for i, (tracker, sharing) in enumerate(fleet):
        _set(tracker, names[i], 2)
        await sharing.exchange(links[i % len(links)])
    stats = await client.info("commandstats")
    calls = {name.removeprefix("cmdstat_"): int(row["calls"]) for name, row in stats.items()}
    return {name: n for name, n in calls.items() if name not in ("info", "config|resetstat")}


async def test_redis_does_the_same_few_commands_per_exchange_whatever_the_replicas(
    redis_client: aioredis.Redis, redis_keys: RedisKeys, links: list[CommandLink]
) -> None:
    """Per exchange and group: one GET of the sums, and one BITFIELD in a group whose counts
    changed; one SCARD per exchange, in one group (every replica is in every group's epoch,
    so one count is everyone's; before, one per group); nothing that grows with the
    replicas (the snapshots' MGET read every other replica's snapshot)."""
    for replicas in (4, 32):
        keys = RedisKeys(f"{redis_keys.prefix}-{replicas}")
        calls = await _commands_per_round(redis_client, keys, links, replicas)
        changed = calls.pop("bitfield")
        assert replicas <= changed <= replicas * GROUPS  # one changed count per replica
        assert calls == {"get": replicas * GROUPS, "scard": replicas}, replicas


async def test_each_group_counts_the_replicas_in_turn_and_the_count_holds(
    redis_keys: RedisKeys, links: list[CommandLink]
) -> None:
    """A replica counts the epoch's replicas in one group per exchange, each group in turn
    (so a cluster's masters share the count alike), and the count is the fleet's: three
    replicas, each seen as three by the one counting."""
    clock = EpochClock()
    fleet = [_replica(redis_keys, f"dp-{i}", clock) for i in range(3)]
    for tracker, _ in fleet:
        _set(tracker, "e#0", 1)
    await _all_at_once(fleet, links)  # everyone enters the epoch
    recording = Recording(links[0])
    counted = []
    for _ in range(2 * GROUPS):
        await fleet[0][1].exchange(recording)  # type: ignore[arg-type]  # forwards to a link
        assert fleet[0][1].replicas_held == 3
        batch = [c.args if isinstance(c, Packed) else c for c in recording.batches[-1]]
        counts = [str(c[1]) for c in batch if c[0] in ("SCARD", "SMEMBERS")]
        assert len(counts) == 1, batch
        counted.append(counts[0].split("}")[0])
    groups = [redis_keys.in_flight_group(g, GROUPS).index.split("}")[0] for g in range(GROUPS)]
    assert sorted(counted[:GROUPS]) == sorted(groups)  # each group once...
    assert counted[GROUPS:] == counted[:GROUPS]  # ...in turn


async def test_an_entry_with_every_endpoint_busy_adds_two_counts_an_operation_exactly(
    redis_client: aioredis.Redis, redis_keys: RedisKeys, links: list[CommandLink]
) -> None:
    """Two replicas with 60 busy endpoints in one group: each one's entry into the next
    epoch is one BITFIELD of 30 operations (two neighbouring counts in each; before, 60),
    and while neighbouring counts move apart (one falls to 0 as the next rises) both epochs'
    sums stay exactly everyone's."""
    clock, rng = EpochClock(), random.Random(7)
    fleet = [_replica(redis_keys, f"dp-{i}", clock, groups=1) for i in range(2)]
    names = [f"e{i:02d}#0" for i in range(60)]
    for tracker, _ in fleet:
        for name in names:
            _set(tracker, name, rng.randrange(1, 4))
    await _all_at_once(fleet, links)
    clock.to_lead()
    recording = Recording(links[0])
    await fleet[0][1].exchange(recording)  # type: ignore[arg-type]  # forwards to a link
    await fleet[1][1].exchange(links[1])
    epoch = int(clock.now // PERIOD_S)
    entry = [
        c.args
        for c in recording.batches[-1]
        if isinstance(c, Packed) and c.args[1] == redis_keys.in_flight_group(0, 1).sums(epoch + 1)
    ]
    assert [len(args[2:]) // 4 for args in entry] == [30]
    for round_ in range(6):
        for tracker, _ in fleet:
            for a, b in zip(names[round_ % 2 :: 2], names[round_ % 2 + 1 :: 2], strict=False):
                _set(tracker, a, 0 if round_ % 3 else rng.randrange(0, 6))
                _set(tracker, b, rng.randrange(0, 6))
        await _all_at_once(fleet, links)
    trackers = [t for t, _ in fleet]
    one_group = redis_keys.in_flight_group(0, 1)
    for e in (epoch, epoch + 1):
        sums = _raw(await redis_client.get(one_group.sums(e)))
        index = await redis_client.hgetall(one_group.index)
        held = {}
        for field_, position in index.items():
            n = int.from_bytes(sums[4 * int(position) : 4 * int(position) + 4], "big", signed=True)
            if field_ and n:
                held[_raw(field_).decode()] = float(n)
        assert held == _others(trackers, -1), e
    await _all_at_once(fleet, links)  # each reads what the other wrote last
    for i, tracker in enumerate(trackers):
        assert tracker.peers_in_flight() == _others(trackers, i), i


async def test_the_replicas_count_holds_while_an_exchange_waits_for_its_answer(
    redis_keys: RedisKeys, links: list[CommandLink]
) -> None:
    """The count others read (the canary splits its capacity by it) is the last answer's
    while the next exchange waits for Redis; before, it was 0 until the answer came."""
    clock = EpochClock()
    fleet = [_replica(redis_keys, f"dp-{i}", clock) for i in range(2)]
    await _all_at_once(fleet, links)
    await _all_at_once(fleet, links)
    sharing = fleet[0][1]
    assert sharing.replicas_held == 2
    held = Held(links[0])
    exchange = asyncio.create_task(sharing.exchange(held))  # type: ignore[arg-type]  # forwards
    await held.reached.wait()
    assert sharing.replicas_held == 2  # the batch is held before Redis
    held.go.set()
    await exchange
    assert sharing.replicas_held == 2


class Held:
    """A link that holds a batch until told, then forwards it to a real one."""

    def __init__(self, link: CommandLink) -> None:
        self.link, self.reached, self.go = link, asyncio.Event(), asyncio.Event()

    async def __call__(self, commands: Sequence[Command]) -> list[Any]:
        self.reached.set()
        await self.go.wait()
        return await self.link(commands)


class Recording:
    """A link that keeps each batch it forwards to a real one (what the replica sent)."""

    def __init__(self, link: CommandLink) -> None:
        self.link, self.batches = link, list[Sequence[Command]]()

    async def __call__(self, commands: Sequence[Command]) -> list[Any]:
        self.batches.append(commands)
        return await self.link(commands)


async def test_a_replica_that_gets_no_answer_drops_the_peers_after_the_ttl(
    redis_keys: RedisKeys, links: list[CommandLink]
) -> None:
    clock, now = EpochClock(), [0.0]
    a, share_a = _replica(redis_keys, "dp-a", clock, clock=lambda: now[0])
    b, share_b = _replica(redis_keys, "dp-b", clock)
    _set(b, "cheap#0", 1)
    await share_b.exchange(links[1])
    await share_a.exchange(links[0])
    assert a.load["cheap#0"] == 1.0
    now[0] = TTL_S / 2
    share_a.expire()  # within the TTL of the last answer: kept
    assert a.load["cheap#0"] == 1.0
    now[0] = TTL_S * 2
    share_a.expire()
    assert a.load["cheap#0"] == 0.0
    await share_a.exchange(links[0])  # answered again: the same sum is applied again
    assert a.load["cheap#0"] == 1.0


async def test_two_processes_under_one_id_are_two_replicas_and_a_clash(
    redis_keys: RedisKeys, links: list[CommandLink]
) -> None:
    """Two processes left on one INSTANCE_ID (docs/data_plane.md, "Replica identity"): each
    counts the other's requests, and each notices the other process."""
    clock, clashes = EpochClock(), {"first": 0, "second": 0}
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
            epoch_clock=clock,
        )
        made.append((tracker, sharing, identity))
    (first, share_first, id_first), (second, share_second, _) = made
    _set(first, "cheap#0", 1)
    _set(second, "cheap#0", 2)
    clock.to_lead()  # both enter the next epoch...
    await share_first.exchange(links[0])
    await share_second.exchange(links[1])
    clock.to_next()  # ...and list its replicas once they read it
    for sharing, link in ((share_first, links[0]), (share_second, links[1])):
        await sharing.exchange(link)
    assert first.peers_in_flight() == {"cheap#0": 2.0}  # not dropped as our own echo
    assert second.peers_in_flight() == {"cheap#0": 1.0}
    assert clashes["first"] >= 1
    assert clashes["second"] >= 1
    assert id_first.warnings()


async def test_positions_stay_dense_when_every_replica_meets_new_endpoints_at_once(
    redis_client: aioredis.Redis, redis_keys: RedisKeys, links: list[CommandLink]
) -> None:
    """Eight replicas meet the same five new endpoints in the same instant, round after
    round, each on its own connection: positions are handed out one per endpoint (1-50),
    so the sums stay 50 counts long. Before, each replica reserved positions for all five
    before claiming them and lost most claims: the index's last position grew to about 8
    times the endpoints, and an endpoint placed later got a position past every reservation,
    which every replica's GET of the sums then carried (at 256 x 1,000 in the scale bench, a
    26 KB sums string instead of 1.4 KB)."""
    clock = EpochClock()
    replicas = [_replica(redis_keys, f"dp-{i}", clock, groups=1) for i in range(8)]
    for round_ in range(10):
        for tracker, _ in replicas:
            for k in range(5):
                _set(tracker, f"e{5 * round_ + k}#0", 1)
        await _all_at_once(replicas, links)
    group = redis_keys.in_flight_group(0, 1)
    assert int(_raw(await redis_client.hget(group.index, ""))) == 50
    await _all_at_once(replicas, links)
    sums = _raw(await redis_client.get(group.sums(int(clock.now // PERIOD_S))))
    assert len(sums) == 4 * 51
    assert [int.from_bytes(sums[4 * p : 4 * p + 4], "big") for p in range(1, 51)] == [8] * 50


async def test_positions_stay_dense_when_every_replica_meets_the_same_new_endpoints(
    redis_client: aioredis.Redis, redis_keys: RedisKeys, links: list[CommandLink]
) -> None:
    """Eight replicas meet five new endpoints each round, one after another: the first
    places them, the others learn its positions (no position reserved and left unused), so
    the sums stay one count per endpoint however many replicas there are. Before the fix
    every replica reserved positions for every endpoint new to it: 400 for 50 endpoints."""
    clock = EpochClock()
    replicas = [_replica(redis_keys, f"dp-{i}", clock, groups=1) for i in range(8)]
    for round_ in range(10):
        for i, (tracker, sharing) in enumerate(replicas):
            for k in range(5):
                _set(tracker, f"e{5 * round_ + k}#0", 1)
            await sharing.exchange(links[i])
    group = redis_keys.in_flight_group(0, 1)
    assert int(_raw(await redis_client.hget(group.index, ""))) == 50  # positions 1-50
    sums = _raw(await redis_client.get(group.sums(int(clock.now // PERIOD_S))))
    assert len(sums) == 4 * 51
    assert [int.from_bytes(sums[4 * p : 4 * p + 4], "big") for p in range(1, 51)] == [8] * 50
