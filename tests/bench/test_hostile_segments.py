"""bench/hostile/segments.py: the engine rows' pooled and paired statistics, on recorded
latencies."""

from __future__ import annotations

import math

import pytest

from bench.hostile.segments import paired, pooled


def segment(slowest: float) -> list[float]:
    """40 samples whose two slowest are `slowest`: its inclusive p99."""
    return [0.09] * 38 + [slowest] * 2


CLEAN = [segment(0.09), segment(0.10), segment(0.09)]
HOSTILE = [segment(0.099), segment(0.50), segment(0.108)]


def test_pooled_reads_every_segment_of_a_kind_together() -> None:
    p = pooled(HOSTILE)
    assert p.n == 120
    assert p.p50_ms == pytest.approx(90.0)
    assert p.slowest_ms == pytest.approx((500.0, 500.0, 108.0, 108.0))
    assert p.p99_ms > 300.0  # one stall in one segment moves the pooled p99 of its kind


def test_paired_ratios_set_each_hostile_segment_against_the_clean_one_before_it() -> None:
    p = paired(CLEAN, HOSTILE)
    assert p.ratios == pytest.approx((1.1, 5.0, 1.2))
    assert p.median == pytest.approx(1.2)  # the stall moves one ratio, not the median
    assert (p.low, p.high) == pytest.approx((1.1, 5.0))


def test_an_empty_segment_leaves_its_pair_out_and_nothing_is_nan() -> None:
    p = paired([[0.1], [], [0.1]], [[0.1], [0.2], []])
    assert p.ratios == pytest.approx((1.0,))
    empty = paired([], [])
    assert math.isnan(empty.median)
    assert pooled([[], []]).n == 0
