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
from data_plane.sync.in_flight_snapshot import Catalog
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


def _in_flight(k: RedisKeys) -> list[str]:
    """In-flight sharing's MGETs of one group's snapshots and catalogs (and its other keys)."""
    group = k.in_flight_group(5, 8)
    snapshots = [group.snapshot(f"dp-{i}\x1fp{i}") for i in range(20)]
    return [group.members, *snapshots, group.catalog(Catalog.of(["a#0"]).fingerprint)]


OPERATIONS: dict[str, Callable[[RedisKeys], list[str]]] = {
    "publish transaction": _publish,
    "rollback transaction": _rollback,
    "trim transactions": _trim,
    "version MGET": _read_versions,
    "live-state MGET": _live_states,
    "in-flight snapshot MGETs": _in_flight,
}

# Where each kind of multi-key operation is written, and how many there are: a new one fails
# the count until it is listed above.
SITES = {
    "control_plane/store/publisher.py": (r"pipeline\(transaction=True\)", 4),
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
    assert k.in_flight_group(0).members == "{gearbox:dp:in-flight:1:0:0}:members"


def test_a_cluster_tags_the_table_and_live_state_keys() -> None:
    assert CLUSTER.table_current == "{gearbox:rt}:current"
    assert CLUSTER.data_plane_state_pattern == "{gearbox:dp:state}:*"


@pytest.mark.parametrize("groups", [1, 3, 6, 8, 64, 256])
def test_each_exchange_call_is_on_one_slot_and_the_groups_spread_evenly(groups: int) -> None:
    """Every key of one group (its list, snapshots and catalogs) is on one slot; the groups' slots
    are spread evenly over the slot range, so the 3 masters of `redis-cli --cluster create`
    (equal ranges) own an equal share of any multiple of 3 groups, within one otherwise."""
    slots = []
    for group in range(groups):
        k = CLUSTER.in_flight_group(group, groups)
        keys = [k.members, k.snapshot("dp-0\x1fp"), k.snapshot(b"x{y}"), k.catalog(b"\x00" * 8)]
        assert len({key_slot(key.encode()) for key in keys}) == 1, keys
        slots.append(key_slot(keys[0].encode()))
    assert len(set(slots)) == groups
    assert slots == sorted(slots)  # group g in the g-th 1/groups of the range
    per_master = [sum(1 for s in slots if s * 3 // 16384 == m) for m in range(3)]
    assert max(per_master) - min(per_master) <= (0 if groups % 3 == 0 else 1), per_master


def test_fleets_that_disagree_on_the_groups_share_no_key() -> None:
    """A replica with another IN_FLIGHT_SHARE_GROUPS reads and writes other keys: it misses
    the others' counts (each still sees them in the scrape) rather than mixing sums."""
    three = {CLUSTER.in_flight_group(g, 3).members for g in range(3)}
    assert three.isdisjoint({CLUSTER.in_flight_group(g, 4).members for g in range(4)})


def test_an_exchange_names_its_groups_keys_only() -> None:
    """Each command of an exchange (writes, the list, the MGETs) names keys of one group
    only, so a cluster routes it to that group's slot owner."""
    identity = ReplicaIdentity("dp-0", lambda: None, lambda: 0.0)
    sharing = InFlightSharing(CLUSTER, identity, dict, lambda _: None, 1.0, lambda: 0.0, groups=3)
    snapshots = sharing._encode({f"e{i}#0": i % 3 for i in range(30)})
    for g, group in enumerate(sharing._groups):
        group.others, group.prune = [b"dp-1\x1fq", b"dp-2\x1fr"], [b"dp-3\x1fs"]
        slot = key_slot(CLUSTER.in_flight_group(g, 3).members.encode())
        for command in sharing._commands(group, snapshots[g], True):
            name, *args = command.args if isinstance(command, Packed) else command
            keys = args if name == "MGET" else args[:1]
            assert {key_slot(str(key).encode()) for key in keys} == {slot}, command


@pytest.mark.parametrize("prefix", ["a{b", "a}b"])
def test_a_prefix_with_braces_is_refused(prefix: str) -> None:
    """A brace in the prefix would move the hash tag."""
    with pytest.raises(ValueError, match="invalid Redis key prefix"):
        RedisKeys(prefix)
