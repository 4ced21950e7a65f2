"""In-flight sharing between replicas (docs/data_plane.md, "In-flight sharing"): the merge of
the other replicas' counts with the scraped depth (pure), the message format and the TTL."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from data_plane.resilience.endpoint_load import LoadTracker, outside_load
from data_plane.settings import DataPlaneSettings, InFlightShareSettings
from data_plane.sync.in_flight_sharing import (
    InFlightSharing,
    encode_snapshot,
    parse_snapshot,
    sum_fresh,
)
from data_plane.sync.replica_identity import ReplicaIdentity


def _is(name: str) -> ReplicaIdentity:
    return ReplicaIdentity(name, lambda: None, lambda: 0.0, process=f"{name}-p")


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


def test_snapshot_round_trip_and_rejects() -> None:
    data = encode_snapshot("dp-1", "dp-1-p", {"a#0": 2, "b#0": 0})
    assert json.loads(data) == {"instance": "dp-1", "process": "dp-1-p", "in_flight": {"a#0": 2}}
    assert parse_snapshot(data, _is("dp-0").is_own) == ("dp-1\x1fdp-1-p", {"a#0": 2.0})
    assert parse_snapshot(data, _is("dp-1").is_own) is None  # our own, echoed back
    for bad in (
        b"not json",
        b"[1]",
        json.dumps({"instance": "dp-1"}).encode(),
        json.dumps({"instance": "dp-1", "in_flight": {"a#0": "2"}}).encode(),
        json.dumps({"instance": "dp-1", "in_flight": {"a#0": True}}).encode(),
        json.dumps({"instance": 3, "in_flight": {}}).encode(),
    ):
        assert parse_snapshot(bad, _is("dp-0").is_own) is None


def test_sum_fresh_drops_stale_replicas() -> None:
    latest = {"dp-1": (10.0, {"a#0": 2.0}), "dp-2": (9.0, {"a#0": 3.0, "b#0": 1.0})}
    assert sum_fresh(latest, 10.5, ttl_s=1.5) == {"a#0": 5.0, "b#0": 1.0}
    assert sum_fresh(latest, 10.5, ttl_s=0.8) == {"a#0": 2.0}


def test_a_replica_that_stops_publishing_expires() -> None:
    now = [0.0]
    tracker = LoadTracker()
    sharing = InFlightSharing(
        "ch", _is("dp-0"), tracker.in_flight_all, tracker.set_peers_in_flight, 1.0, lambda: now[0]
    )
    sharing.receive(encode_snapshot("dp-1", "dp-1-p", {"a#0": 4}))
    sharing.receive(encode_snapshot("dp-0", "dp-0-p", {"a#0": 9}))  # our own: ignored
    assert tracker.load["a#0"] == 4.0
    now[0] = 1.5
    sharing.expire()
    assert tracker.load["a#0"] == 0.0


def test_settings_default_and_ttl_shorter_than_interval_is_refused() -> None:
    settings = DataPlaneSettings()
    assert (settings.in_flight_share.interval_ms, settings.in_flight_share.ttl_s) == (25, 1.0)
    off = DataPlaneSettings(in_flight_share=InFlightShareSettings(interval_ms=0))
    assert off.in_flight_share.interval_ms == 0
    with pytest.raises(ValidationError, match="in_flight_share_ttl_s"):
        DataPlaneSettings.model_validate(
            {"in_flight_share_interval_ms": 2000, "in_flight_share_ttl_s": 1.0}
        )
