"""resilience/band_arrivals.py: requests decided per pair and band over the last second, read
as the rate of the bands above a class, per pair, from whole 100 ms buckets."""

from __future__ import annotations

import pytest

from data_plane.resilience.band_arrivals import BUCKETS, BandArrivals

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
