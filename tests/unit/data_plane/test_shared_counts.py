"""sync/shared_counts.py: what the in-flight sums carry, a replica's in-flight counts and its
higher-band arrivals, and the others' sums split again between the load tracker and the
arrivals."""

from __future__ import annotations

import pytest

from data_plane.resilience.band_arrivals import BandArrivals, shared_name
from data_plane.resilience.endpoint_load import LoadTracker
from data_plane.sync.shared_counts import SharedCounts

CRITICAL, STANDARD = 1.0, 0.75


class _Clock:
    def __init__(self) -> None:
        self.now = 100.05

    def __call__(self) -> float:
        return self.now


def test_own_is_the_trackers_mapping_until_a_band_has_arrivals_then_both() -> None:
    clock, tracker = _Clock(), LoadTracker()
    arrivals = BandArrivals(clock)
    counts = SharedCounts(tracker, arrivals)
    tracker.acquire("int4#0")
    assert counts.own() is tracker.in_flight_all()  # no copy while no band has arrivals
    arrivals.arrived("int4", CRITICAL)
    clock.now += 0.1
    assert counts.own() == {"int4#0": 1, shared_name("int4", CRITICAL): 1}
    assert tracker.in_flight_all() == {"int4#0": 1}  # the tracker's own counts untouched


def test_the_others_sums_go_to_the_tracker_and_the_arrivals_apart() -> None:
    clock, tracker = _Clock(), LoadTracker()
    arrivals = BandArrivals(clock)
    SharedCounts(tracker, arrivals).on_peers({"int4#0": 3.0, shared_name("int4", CRITICAL): 5.0})
    assert tracker.peers_in_flight() == {"int4#0": 3.0}
    assert arrivals.above(STANDARD) == {"int4": pytest.approx(5.0)}


def test_without_arrivals_the_counts_are_the_trackers_alone() -> None:
    tracker = LoadTracker()
    counts = SharedCounts(tracker, None)
    tracker.acquire("int4#0")
    assert counts.own() is tracker.in_flight_all()
    counts.on_peers({"int4#0": 2.0})
    assert tracker.peers_in_flight() == {"int4#0": 2.0}
