"""decision/capacity.py: sustainable concurrency for the budget in play, less the margin
the answers ask for, and the line a class may fill of it."""

from __future__ import annotations

import pytest

from data_plane.decision.capacity import class_line, less_margin, sustainable_load
from data_plane.decision.feasibility import Limits
from data_plane.domain import BudgetMode
from tests.unit.data_plane.admission_fleet import bench_fleet


def limits(latency_s: float | None, ttft_s: float | None = None) -> Limits:
    return Limits("chat", 15, latency_s, ttft_s, 0.0, None, BudgetMode.BEST_EFFORT)


def test_sustainable_concurrency_is_the_largest_load_that_meets_the_budget() -> None:
    pair = bench_fleet().pairs[0]
    assert sustainable_load(pair, limits(0.4), 8) == 8  # 0.39 s at 8, 0.42 s at 9
    assert sustainable_load(pair, limits(0.6), 8) == 15
    assert sustainable_load(pair, limits(0.1), 8) == 0  # 0.18 s even alone
    assert sustainable_load(pair, limits(None, ttft_s=0.02), 8) == 0
    # No latency budget in play: the profile's highest measured load, not the budget's.
    assert sustainable_load(pair, limits(None), 8) == 64


def test_the_margin_the_answers_ask_for_comes_off_the_budget_bounded() -> None:
    """0.15 + 0.03 L against 400 ms: 8 with no margin, 7 with 20 ms (0.36 s at 7, 0.39 s at
    8), 6 with 50 ms; a margin past a quarter of the budget takes that quarter (5: 0.30 s)."""
    pair = bench_fleet().pairs[0]
    assert sustainable_load(pair, limits(0.4), 8, margin_s=0.0) == 8
    assert sustainable_load(pair, limits(0.4), 8, margin_s=0.02) == 7
    assert sustainable_load(pair, limits(0.4), 8, margin_s=0.05) == 6
    assert sustainable_load(pair, limits(0.4), 8, margin_s=5.0) == 5
    assert less_margin(limits(0.4, 0.2), 0.02)[2:4] == pytest.approx((0.38, 0.18))
    assert less_margin(limits(None, 0.02), 0.02).ttft_s == pytest.approx(0.015)
    assert sustainable_load(pair, limits(None), 8, margin_s=0.05) == 64  # no budget: no margin


def test_a_class_fills_its_share_rounded_down_never_below_one() -> None:
    assert class_line(8, 0.75) == 6
    assert class_line(8, 0.5) == 4
    assert class_line(8, 1.0) == 8
    assert class_line(1, 0.75) == 1  # issue 32, finding 1: 0.75 x 1 refused an idle pair
    assert class_line(1, 0.01) == 1
    assert class_line(4, 0.75) == 3
