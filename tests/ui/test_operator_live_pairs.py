"""The operator page's per-pair live figures: counters summed over instances, rates, cost
saved per family and fleet-wide (pure merge, no I/O)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from contracts.latency_feedback import ratio_bucket
from contracts.live_state import DataPlaneState, PairCounters
from control_plane.ui.live import merge_live_states, merge_pair_counters

NOW = datetime(2026, 11, 25, 12, 0, tzinfo=UTC)


def _state(instance: str, pairs: dict[str, PairCounters]) -> DataPlaneState:
    return DataPlaneState(instance=instance, table_version=3, updated_at=NOW, pairs=pairs)


A = PairCounters(
    family="small",
    requests=8,
    budget_met=5,
    budget_missed=1,
    errors=2,
    retries=0,
    cost_usd=1.0,
    baseline_cost_usd=3.0,
    fleet_baseline_cost_usd=5.0,
    latency_n=8,
    latency_sum_s=8.0,
    predicted_sum_s=4.0,
    ratio_counts={ratio_bucket(2.0): 8},
)
B = PairCounters(
    family="small",
    requests=2,
    budget_met=1,
    budget_missed=3,
    errors=0,
    retries=1,
    cost_usd=0.5,
    baseline_cost_usd=1.0,
    fleet_baseline_cost_usd=2.0,
    latency_n=2,
    latency_sum_s=2.0,
    predicted_sum_s=2.0,
    ratio_counts={ratio_bucket(1.0): 2},
)
BIG = PairCounters(
    family="big", requests=4, cost_usd=2.0, baseline_cost_usd=2.0, fleet_baseline_cost_usd=2.0
)


def test_counters_of_one_pair_are_summed_over_instances() -> None:
    (view,) = merge_pair_counters([_state("a", {"s@int4": A}), _state("b", {"s@int4": B})])
    assert (view.pair, view.family, view.requests) == ("s@int4", "small", 10)
    assert (view.budget_met, view.budget_missed) == (6, 4)
    assert view.budget_attainment == pytest.approx(0.6)
    assert (view.errors, view.retries) == (2, 1)
    assert view.error_rate == pytest.approx(2 / 12)  # errors per attempt (10 answers + 2 failed)
    assert view.retry_rate == pytest.approx(0.1)
    assert view.cost_usd == pytest.approx(1.5)
    assert view.cost_saved_usd == pytest.approx(2.5)
    assert view.fleet_cost_saved_usd == pytest.approx(5.5)
    assert view.observed_mean_s == pytest.approx(1.0)
    assert view.predicted_mean_s == pytest.approx(0.6)
    # 8 of 10 answers took about twice the prediction: median and p95 near 2, not 1.
    assert view.ratio_p50 == pytest.approx(2.0, rel=0.05)
    assert view.ratio_p95 == pytest.approx(2.0, rel=0.05)


def test_rates_are_none_without_traffic() -> None:
    (view,) = merge_pair_counters([_state("a", {"s@int4": PairCounters(family="small")})])
    assert view.budget_attainment is None
    assert view.error_rate is None
    assert view.retry_rate is None
    assert view.observed_mean_s is None
    assert view.ratio_p50 is None


def test_live_view_sums_cost_per_family_and_fleet_wide() -> None:
    live = merge_live_states(
        [_state("a", {"s@int4": A, "b@fp16": BIG}), _state("b", {"s@int4": B})], 3, NOW
    )
    assert [p.pair for p in live.pairs] == ["b@fp16", "s@int4"]
    assert set(live.family_cost) == {"big", "small"}
    assert live.family_cost["small"].cost_saved_usd == pytest.approx(2.5)
    assert live.family_cost["big"].cost_saved_usd == pytest.approx(0.0)
    assert live.fleet_cost is not None
    assert live.fleet_cost.requests == 14
    assert live.fleet_cost.cost_usd == pytest.approx(3.5)
    assert live.fleet_cost.cost_saved_usd == pytest.approx(2.5)
    assert live.fleet_cost.fleet_cost_saved_usd == pytest.approx(5.5)


def test_an_instance_counts_once_when_it_wrote_twice() -> None:
    older = DataPlaneState(
        instance="a", table_version=3, updated_at=NOW.replace(hour=11), pairs={"s@int4": B}
    )
    live = merge_live_states([older, _state("a", {"s@int4": A})], 3, NOW)
    assert [p.requests for p in live.pairs] == [8]


def test_states_without_counters_still_merge() -> None:
    """A data plane of the previous release writes no `pairs`: the view has none."""
    old = DataPlaneState.model_validate_json(
        '{"instance": "a", "updated_at": "2026-11-25T12:00:00Z", "requests_by_pair": {"x": 1}}'
    )
    live = merge_live_states([old], None, NOW)
    assert live.pairs == []
    assert live.fleet_cost is None
    assert live.requests_by_pair == {"x": 1}
