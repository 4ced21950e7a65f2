"""resilience/band_arrivals.py: requests decided per pair and band over the last second, read
as the rate of the bands above a class, per pair, from whole 100 ms buckets."""

from __future__ import annotations

import pytest

from data_plane.resilience.band_arrivals import (
    BUCKETS,
    BandArrivals,
    parsed_name,
    shared_name,
)

CRITICAL, STANDARD, BATCH = 1.0, 0.75, 0.5


class _Clock:
    def __init__(self) -> None:
        self.now = 100.05  # mid-bucket: steps of 0.1 s land in the next bucket

    def __call__(self) -> float:
        return self.now


def test_the_rate_above_a_band_counts_only_the_bands_above_it_at_each_pair() -> None:
    clock = _Clock()
    arrivals = BandArrivals(clock)
    for _ in range(6):
        arrivals.arrived("int4", CRITICAL)
    arrivals.arrived("int4", STANDARD)
    arrivals.arrived("fp16", STANDARD)
    arrivals.arrived("fp16", BATCH)
    clock.now += 0.1  # the bucket they fell in is whole now
    assert arrivals.above(STANDARD) == {"int4": pytest.approx(6.0)}
    assert arrivals.above(BATCH) == {"int4": pytest.approx(7.0), "fp16": pytest.approx(1.0)}
    assert arrivals.above(CRITICAL) == {}  # the top band: nothing above it


def test_the_current_bucket_is_not_read_and_the_window_forgets_after_a_second() -> None:
    clock = _Clock()
    arrivals = BandArrivals(clock)
    arrivals.arrived("int4", CRITICAL)
    assert arrivals.above(STANDARD) == {}  # its bucket is not whole yet
    clock.now += 0.1
    assert arrivals.above(STANDARD) == {"int4": pytest.approx(1.0)}
    clock.now += (BUCKETS - 1) * 0.1
    assert arrivals.above(STANDARD) == {"int4": pytest.approx(1.0)}  # still in the window
    clock.now += 0.1
    assert arrivals.above(STANDARD) == {}


def test_a_ring_slot_reused_for_a_later_bucket_starts_from_zero() -> None:
    """Bounded memory: one count per bucket, reused BUCKETS buckets later."""
    clock = _Clock()
    arrivals = BandArrivals(clock)
    for _ in range(5):
        arrivals.arrived("int4", CRITICAL)
    clock.now += BUCKETS * 0.1  # the same slot of the ring, a second later
    arrivals.arrived("int4", CRITICAL)
    clock.now += 0.1
    assert arrivals.above(STANDARD) == {"int4": pytest.approx(1.0)}


def test_pairs_a_new_table_drops_are_forgotten() -> None:
    clock = _Clock()
    arrivals = BandArrivals(clock)
    arrivals.arrived("old", CRITICAL)
    arrivals.arrived("int4", CRITICAL)
    arrivals.forget({"int4"})
    clock.now += 0.1
    assert arrivals.above(STANDARD) == {"int4": pytest.approx(1.0)}


def test_the_counts_shared_are_the_window_of_the_bands_above_the_lowest_by_name() -> None:
    """What a replica adds to the in-flight sums: its whole buckets of the window, per pair
    and band, none for the table's lowest band (no line reserves against it)."""
    clock = _Clock()
    arrivals = BandArrivals(clock)
    arrivals.forget({"int4", "fp16"}, lowest=BATCH)
    for _ in range(3):
        arrivals.arrived("int4", CRITICAL)
    arrivals.arrived("fp16", STANDARD)
    arrivals.arrived("fp16", BATCH)
    assert arrivals.shared() == {}  # the bucket is not whole yet
    clock.now += 0.1
    assert arrivals.shared() == {
        shared_name("int4", CRITICAL): 3,
        shared_name("fp16", STANDARD): 1,
    }
    assert parsed_name(shared_name("a\x1fb@int4", STANDARD)) == ("a\x1fb@int4", STANDARD)
    assert parsed_name("int4#0") is None  # an endpoint's count
    clock.now += BUCKETS * 0.1
    assert arrivals.shared() == {}  # out of the window: the count falls back to none


def test_the_other_replicas_counts_add_to_the_rate_above_a_band() -> None:
    """The peers' sums, read by `above` at once (not a bucket later), with this replica's;
    a name that is no band count is ignored, and new sums replace the old."""
    clock = _Clock()
    arrivals = BandArrivals(clock)
    arrivals.arrived("int4", CRITICAL)
    clock.now += 0.1
    assert arrivals.above(STANDARD) == {"int4": pytest.approx(1.0)}
    arrivals.set_peers(
        {
            shared_name("int4", CRITICAL): 4.0,
            shared_name("fp16", STANDARD): 2.0,
            "int4#0": 7.0,
        }
    )
    assert arrivals.above(STANDARD) == {"int4": pytest.approx(5.0)}
    assert arrivals.above(BATCH) == {"int4": pytest.approx(5.0), "fp16": pytest.approx(2.0)}
    arrivals.set_peers({})
    assert arrivals.above(STANDARD) == {"int4": pytest.approx(1.0)}
