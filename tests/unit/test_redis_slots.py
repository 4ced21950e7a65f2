"""Every multi-key Redis operation is on one hash slot in a cluster, by the key names alone
(contracts/redis_keys.py): each transaction, script and multi-key read is listed here with
its keys, and their slots must agree. A new transaction or script in the planes' code that
is not listed fails `test_every_transaction_and_script_is_listed`."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import pytest
from redis.crc import key_slot

from contracts.redis_keys import RedisKeys
from data_plane.sync.command_link import Packed
from data_plane.sync.in_flight_sharing import InFlightSharing
from data_plane.sync.replica_identity import ReplicaIdentity

ROOT = Path(__file__).resolve().parents[2]
CLUSTER = RedisKeys("gearbox", cluster=True)


def _publish(k: RedisKeys) -> list[str]:
    """Publisher._publish_locked: WATCH current; GET current and the previous version; INCR
    seq; SET the new version NX; MULTI SET current, ZADD history, SPUBLISH events; EXEC."""
    return [
        k.table_current,
        k.table_version(6),
        k.table_seq,
        k.table_version(7),
        k.table_history,
        k.table_events,
    ]


def _rollback(k: RedisKeys) -> list[str]:
    """Publisher.rollback: WATCH current; GET current, the version, ZSCORE history; MULTI ..."""
    return [k.table_current, k.table_version(3), k.table_history, k.table_events]


def _trim(k: RedisKeys) -> list[str]:
    """Publisher._trim and _trim_orphans: WATCH current, history; DEL old versions; ZREM."""
    return [k.table_current, k.table_history, k.table_version(1), k.table_version(2)]


def _read_versions(k: RedisKeys) -> list[str]:
    """PublishedTables and the UI's loop page: one MGET of kept versions."""
    return [k.table_version(v) for v in range(1, 30)]


def _live_states(k: RedisKeys) -> list[str]:
    """The UI's live page: SCAN the live-state pattern, one MGET of what it found."""
    return [k.data_plane_state(f"replica-{i}") for i in range(20)]


def _in_flight_sums(k: RedisKeys) -> list[str]:
    """In-flight sums' keys of one group: a round trip names several (the index, two epochs'
    sums and joined sets)."""
    group = k.in_flight_group(5, 8)
    return [group.index, group.sums(41), group.sums(42), group.joined(41), group.joined(42)]


def _in_flight_claim(k: RedisKeys) -> list[str]:
    """InFlightSharing._claim: one script call names its group's index alone."""
    return [k.in_flight_group(5, 8).index]


OPERATIONS: dict[str, Callable[[RedisKeys], list[str]]] = {
    "publish transaction": _publish,
    "rollback transaction": _rollback,
    "trim transactions": _trim,
    "version MGET": _read_versions,
    "live-state MGET": _live_states,
    "in-flight sums' round trips": _in_flight_sums,
    "in-flight index claim script": _in_flight_claim,
}

# Where each kind of multi-key operation is written, and how many there are: a new one fails
# the count until it is listed above.
SITES = {
    "control_plane/store/publisher.py": (r"pipeline\(transaction=True\)", 4),
    "data_plane/sync/in_flight_sharing.py": (r"redis\.call\(", 3),  # the index claim: one key
}


@pytest.mark.parametrize("name", sorted(OPERATIONS))
def test_a_cluster_operations_keys_share_one_slot(name: str) -> None:
    keys = OPERATIONS[name](CLUSTER)
    slots = {key: key_slot(key.encode()) for key in keys}
    assert len(set(slots.values())) == 1, slots


def test_the_table_and_the_live_states_are_on_different_slots() -> None:
    """One tag per family, not one for everything: the cluster spreads them."""
    assert key_slot(CLUSTER.table_current.encode()) != key_slot(
        CLUSTER.data_plane_state("a").encode()
    )


def test_every_transaction_and_script_is_listed() -> None:
    for path, (pattern, count) in SITES.items():
        assert len(re.findall(pattern, (ROOT / path).read_text())) == count, path
    sources = [*ROOT.glob("control_plane/**/*.py"), *ROOT.glob("data_plane/**/*.py")]
    for source in sources:
        text = source.read_text()
        relative = str(source.relative_to(ROOT))
        if relative not in SITES:
            assert not re.search(r"pipeline\(transaction=True\)|redis\.call\(", text), relative


def test_standalone_and_sentinel_key_names_are_unchanged() -> None:
    """The names every deployment before clusters wrote (95376ca): no migration."""
    k = RedisKeys("gearbox")
    assert [k.table_seq, k.table_version(4), k.table_current, k.table_history] == [
        "gearbox:rt:seq",
        "gearbox:rt:v:4",
        "gearbox:rt:current",
        "gearbox:rt:history",
    ]
    assert [k.table_events, k.publish_lock, k.data_plane_state("a")] == [
        "gearbox:rt:events",
        "gearbox:rt:lock",
        "gearbox:dp:state:a",
    ]
    assert k.data_plane_state_pattern == "gearbox:dp:state:*"
    assert k.in_flight_group(0).index == "{gearbox:dp:in-flight:1:0:0}:index"


def test_a_cluster_tags_the_table_and_live_state_keys() -> None:
    assert CLUSTER.table_current == "{gearbox:rt}:current"
    assert CLUSTER.data_plane_state_pattern == "{gearbox:dp:state}:*"


@pytest.mark.parametrize("groups", [1, 3, 6, 8, 64, 256])
def test_each_exchange_call_is_on_one_slot_and_the_groups_spread_evenly(groups: int) -> None:
    """Every key of one group (its index, every epoch's sums and replicas) is on one slot;
    the groups' slots are spread evenly over the slot range, so the 3 masters of `redis-cli
    --cluster create` (equal ranges) own an equal share of any multiple of 3 groups, within
    one otherwise."""
    slots = []
    for group in range(groups):
        k = CLUSTER.in_flight_group(group, groups)
        keys = [k.index, k.sums(0), k.sums(123456789), k.joined(7)]
        assert len({key_slot(key.encode()) for key in keys}) == 1, keys
        slots.append(key_slot(keys[0].encode()))
    assert len(set(slots)) == groups
    assert slots == sorted(slots)  # group g in the g-th 1/groups of the range
    per_master = [sum(1 for s in slots if s * 3 // 16384 == m) for m in range(3)]
    assert max(per_master) - min(per_master) <= (0 if groups % 3 == 0 else 1), per_master


def test_fleets_that_disagree_on_the_groups_share_no_key() -> None:
    """A replica with another IN_FLIGHT_SHARE_GROUPS reads and writes other keys: it misses
    the others' counts (each still sees them in the scrape) rather than mixing sums."""
    three = {CLUSTER.in_flight_group(g, 3).index for g in range(3)}
    assert three.isdisjoint({CLUSTER.in_flight_group(g, 4).index for g in range(4)})


class Recording:
    """A link that records each command and answers as Redis would, enough for an exchange:
    positions counted up per index, claims kept, nothing held for the rest."""

    def __init__(self) -> None:
        self.commands: list[tuple[object, ...]] = []
        self.fields: dict[tuple[object, object], int] = {}

    async def __call__(self, commands: list[tuple[object, ...] | Packed]) -> list[object]:
        args = [c.args if isinstance(c, Packed) else c for c in commands]
        self.commands += args
        return [self._answer(*command) for command in args]

    def _answer(self, name: object, key: object = None, *args: object) -> object:
        if name == "EVAL":  # the index claim: a position for each endpoint that has none
            index, endpoints = args[1], args[2:]
            return [self._position(index, endpoint) for endpoint in endpoints]
        if name == "HMGET":
            return [self.fields.get((key, field)) for field in args]
        return [] if name in ("BITFIELD", "SMEMBERS") else None if name == "GET" else 1

    def _position(self, index: object, endpoint: object) -> int:
        if (index, endpoint) not in self.fields:
            self.fields[index, ""] = self.fields.get((index, ""), 0) + 1
            self.fields[index, endpoint] = self.fields[index, ""]
        return self.fields[index, endpoint]


async def test_every_command_of_the_in_flight_sums_names_its_groups_keys_only() -> None:
    """Each command a sums exchange sends (placing new endpoints, entering two epochs, the
    changes, the read) names keys of one group only, so a cluster routes it to that group's
    slot owner."""
    identity = ReplicaIdentity("dp-0", lambda: None, lambda: 0.0)
    own = {f"e{i}#0": 1 + i % 3 for i in range(30)}
    lead = 0.79  # within the lead before epoch 1 (TTL 1 s: epochs of 0.8 s, a 0.2 s lead)
    sharing = InFlightSharing(
        CLUSTER,
        identity,
        lambda: own,
        lambda _: None,
        1.0,
        lambda: 0.0,
        groups=3,
        epoch_clock=lambda: lead,
    )
    link = Recording()
    await sharing.exchange(link)  # type: ignore[arg-type]  # a recording link
    own.update({f"e{i}#0": 5 for i in range(30)})
    await sharing.exchange(link)  # type: ignore[arg-type]
    names = {str(c[0]) for c in link.commands}
    assert {"EVAL", "HMGET", "BITFIELD", "SADD", "PEXPIRE", "GET", "SCARD"} <= names
    slots = {key_slot(CLUSTER.in_flight_group(g, 3).index.encode()) for g in range(3)}
    assert len(slots) == 3
    for command in link.commands:  # one key each (HMGET's other arguments are fields)
        key = command[3] if command[0] == "EVAL" else command[1]  # a script's KEYS[1]
        assert key_slot(str(key).encode()) in slots, command


@pytest.mark.parametrize("prefix", ["a{b", "a}b"])
def test_a_prefix_with_braces_is_refused(prefix: str) -> None:
    """A brace in the prefix would move the hash tag."""
    with pytest.raises(ValueError, match="invalid Redis key prefix"):
        RedisKeys(prefix)
