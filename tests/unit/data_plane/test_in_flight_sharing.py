"""In-flight sharing between replicas (docs/data_plane.md, "In-flight sharing"): the merge of
the other replicas' counts with the scraped depth (pure), the message format and the TTL."""

from __future__ import annotations

import random
import zlib

import pytest
from pydantic import ValidationError

from data_plane.resilience.endpoint_load import LoadTracker, outside_load
from data_plane.settings import DataPlaneSettings, InFlightShareSettings
from data_plane.sync.in_flight_snapshot import (
    COUNT_MAX,
    Catalog,
    encode,
    fingerprints,
    group_of,
    next_wait_s,
    sum_snapshots,
)


@pytest.mark.parametrize(
    ("scraped", "at_scrape", "now", "expected"),
    [
        (None, 0.0, 3.0, 3.0),  # never scraped: the peers' counts alone
        (5.0, 0.0, 0.0, 5.0),  # sharing off: the scrape alone, as before
        (5.0, 4.0, 4.0, 5.0),  # the scrape already held the peers' 4: not counted twice
        (5.0, 4.0, 9.0, 10.0),  # peers sent 5 more since: seen before the next scrape
        (5.0, 4.0, 0.0, 1.0),  # peers' requests ended: only other clients' 1 remains
        (2.0, 4.0, 6.0, 6.0),  # peers' requests not yet at the engine: never negative
    ],
)
def test_outside_load(scraped: float | None, at_scrape: float, now: float, expected: float) -> None:
    assert outside_load(scraped, at_scrape, now) == expected


def test_tracker_merges_peers_with_own_and_scrape() -> None:
    tracker = LoadTracker()
    tracker.acquire("a#0")
    tracker.set_peers_in_flight({"a#0": 3.0})
    assert tracker.load["a#0"] == 4.0  # own 1 + peers 3, no scrape yet
    tracker.set_queue_depth("a#0", 6.0)  # own 1 + peers 3 + 2 from other clients
    assert tracker.load["a#0"] == 6.0
    tracker.set_peers_in_flight({"a#0": 7.0})  # between scrapes, the peers send 4 more
    assert tracker.load["a#0"] == 10.0
    tracker.acquire("a#0")
    assert tracker.load["a#0"] == 11.0
    tracker.set_peers_in_flight({})  # every peer's snapshot expired or drained
    assert tracker.load["a#0"] == 2.0 + 2.0
    assert tracker.peers_in_flight() == {}


def test_tracker_load_is_own_plus_outside_load_after_any_sequence() -> None:
    """The tracker refreshes only what changed, in one pass: after random acquires, releases,
    scrapes, shared counts and forgets, every endpoint's load is still own in flight +
    outside_load(the last scrape less own then, the peers then, the peers now)."""
    rng = random.Random(5)
    endpoints = [f"p{i}#0" for i in range(6)]
    tracker = LoadTracker()
    peers: dict[str, float] = {}
    scraped: dict[str, tuple[float, float]] = {}  # endpoint -> (scrape less own, peers then)
    for _ in range(2000):
        endpoint, step = rng.choice(endpoints), rng.randrange(5)
        if step == 0:
            tracker.acquire(endpoint)
        elif step == 1:
            tracker.release(endpoint)
        elif step == 2:
            depth = float(rng.randrange(8))
            tracker.set_queue_depth(endpoint, depth)
            own = tracker.in_flight(endpoint)
            scraped[endpoint] = (max(0.0, depth - own), peers.get(endpoint, 0.0))
        elif step == 3:
            peers = {e: float(rng.randrange(4)) for e in rng.sample(endpoints, 3)}
            tracker.set_peers_in_flight(peers)
        else:
            keep = set(rng.sample(endpoints, 4))
            tracker.forget(keep)
            scraped = {e: v for e, v in scraped.items() if e in keep}
        for e in endpoints:
            at = scraped.get(e)
            outside = outside_load(at and at[0], at[1] if at else 0.0, peers.get(e, 0.0))
            assert tracker.load.get(e, 0.0) == tracker.in_flight(e) + outside, e


def test_the_sum_of_snapshots_is_the_sum_of_their_counts() -> None:
    """Snapshots of one catalog and of another (a replica that met a new endpoint) add up per
    endpoint; a snapshot of an unknown catalog, or cut short, counts as none."""
    one, two = Catalog.of(["b#0", "a#0"]), Catalog.of(["a#0", "b#0", "c#0"])
    assert one.endpoints == ("a#0", "b#0")  # sorted: equal sets share one catalog
    snapshots = [
        encode(one, {"a#0": 2, "b#0": 0, "z#0": 9}),  # z is not in the catalog: not sent
        encode(one, {"a#0": 1, "b#0": 4}),
        encode(two, {"c#0": 3}),
    ]
    catalogs = {c.fingerprint: c for c in (one, two)}
    assert fingerprints(snapshots) == set(catalogs)
    assert sum_snapshots(snapshots, catalogs) == {"a#0": 3.0, "b#0": 4.0, "c#0": 3.0}
    assert sum_snapshots(snapshots, {one.fingerprint: one}) == {"a#0": 3.0, "b#0": 4.0}
    assert sum_snapshots([snapshots[0][:-1], b"short"], catalogs) == {}
    assert sum_snapshots([], catalogs) == {}


def test_many_large_counts_sum_without_a_carry_between_endpoints() -> None:
    """A count past 32 bits is capped, one below zero is 0, and 600 replicas at the cap sum
    exactly: no count spills into the next endpoint's."""
    catalog = Catalog.of(["a#0", "b#0", "c#0"])
    top = encode(catalog, {"a#0": 10**12, "b#0": 0, "c#0": -3})
    assert sum_snapshots([top], {catalog.fingerprint: catalog}) == {"a#0": float(COUNT_MAX)}
    many = [top] * 600
    summed = sum_snapshots(many, {catalog.fingerprint: catalog})
    assert summed == {"a#0": float(COUNT_MAX * 600)}


def test_a_catalog_is_taken_only_under_its_own_fingerprint() -> None:
    catalog = Catalog.of(["x#1", "x#0"])
    assert Catalog.parse(catalog.fingerprint, catalog.text) == catalog
    assert Catalog.parse(catalog.fingerprint, b"x#0") is None  # another list
    assert Catalog.parse(catalog.fingerprint, None) is None  # expired
    empty = Catalog.of([])
    assert Catalog.parse(empty.fingerprint, empty.text) == empty
    assert encode(empty, {"a#0": 1}) == empty.fingerprint


def test_random_snapshots_sum_as_dictionaries_would() -> None:
    rng = random.Random(11)
    names = [f"e{i}#0" for i in range(40)]
    catalogs: dict[bytes, Catalog] = {}
    snapshots: list[bytes] = []
    expected: dict[str, float] = {}
    for _ in range(300):
        catalog = Catalog.of(rng.sample(names, rng.randrange(1, 40)))
        catalogs[catalog.fingerprint] = catalog
        own = {e: rng.randrange(0, 5) for e in catalog.endpoints}
        snapshots.append(encode(catalog, own))
        for e, n in own.items():
            if n:
                expected[e] = expected.get(e, 0.0) + n
    assert sum_snapshots(snapshots, catalogs) == expected


def test_a_lone_replica_exchanges_at_half_the_ttl() -> None:
    assert next_wait_s(2, 0, 0.025, 0.1, 1.0) == 0.025  # someone else is heard: full rate
    assert next_wait_s(1, 0, 0.025, 0.1, 1.0) == 0.5  # only our own snapshot: stay visible only
    assert next_wait_s(0, 0, 0.025, 0.1, 1.0) == 0.5  # no answer (Redis down): retry slowly
    assert next_wait_s(1, 0, 2.0, 2.0, 1.0) == 2.0  # never faster than the interval


def test_the_wait_doubles_while_nothing_changes_up_to_the_longest() -> None:
    waits = [next_wait_s(5, quiet, 0.025, 0.1, 1.0) for quiet in range(5)]
    assert waits == [0.025, 0.05, 0.1, 0.1, 0.1]
    assert next_wait_s(5, 3, 0.025, 0.01, 1.0) == 0.025  # a longest below the interval: ignored
    assert next_wait_s(5, 10_000, 0.025, 0.1, 1.0) == 0.1  # no overflow after a long quiet


def test_endpoints_spread_over_the_groups_the_same_way_everywhere() -> None:
    endpoints = [f"family-{i}@awq-int4#{i % 3}" for i in range(1000)]
    groups = [group_of(e, 8) for e in endpoints]
    assert groups == [zlib.crc32(e.encode()) % 8 for e in endpoints]  # not Python's hash()
    sizes = [groups.count(g) for g in range(8)]
    assert min(sizes) >= 90, sizes  # 125 each on average
    assert max(sizes) <= 160, sizes
    assert {group_of(e, 1) for e in endpoints} == {0}


def test_settings_default_and_ttl_shorter_than_interval_is_refused() -> None:
    settings = DataPlaneSettings()
    assert (settings.in_flight_share.interval_ms, settings.in_flight_share.ttl_s) == (25, 1.0)
    off = DataPlaneSettings(in_flight_share=InFlightShareSettings(interval_ms=0))
    assert off.in_flight_share.interval_ms == 0
    with pytest.raises(ValidationError, match="in_flight_share_ttl_s"):
        DataPlaneSettings.model_validate(
            {"in_flight_share_interval_ms": 2000, "in_flight_share_ttl_s": 1.0}
        )
    with pytest.raises(ValidationError, match="in_flight_share_max_interval_ms"):
        DataPlaneSettings.model_validate(
            {"in_flight_share_max_interval_ms": 1500, "in_flight_share_ttl_s": 1.0}
        )
