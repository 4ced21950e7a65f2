"""In-flight sharing between replicas (docs/data_plane.md, "In-flight sharing"): the merge of
the other replicas' counts with the scraped depth (pure), the message format and the TTL."""

from __future__ import annotations

import random
import zlib

import pytest
from pydantic import ValidationError

from data_plane.resilience.endpoint_load import LoadTracker, outside_load
from data_plane.settings import DataPlaneSettings, InFlightShareSettings
from data_plane.sync.in_flight_epochs import group_of, next_wait_s


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


def test_a_lone_replica_exchanges_once_per_lead() -> None:
    """Alone it only has to enter each epoch in time: once per lead (0.2 s at a 1 s TTL)."""
    assert next_wait_s(2, 0, 0.025, 0.1, 0.2) == 0.025  # someone else is heard: full rate
    assert next_wait_s(1, 0, 0.025, 0.1, 0.2) == 0.2  # only ourselves: once per lead
    assert next_wait_s(0, 0, 0.025, 0.1, 0.2) == 0.2  # no answer (Redis down): retry slowly
    assert next_wait_s(1, 0, 2.0, 2.0, 0.2) == 2.0  # never faster than the interval


def test_the_wait_doubles_while_nothing_changes_up_to_the_longest_and_the_lead() -> None:
    waits = [next_wait_s(5, quiet, 0.025, 0.1, 0.2) for quiet in range(5)]
    assert waits == [0.025, 0.05, 0.1, 0.1, 0.1]
    assert next_wait_s(5, 3, 0.025, 0.01, 0.2) == 0.025  # a longest below the interval: ignored
    assert next_wait_s(5, 10_000, 0.025, 0.1, 0.2) == 0.1  # no overflow after a long quiet
    assert next_wait_s(5, 10, 0.025, 1.0, 0.2) == 0.2  # never past the lead


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
