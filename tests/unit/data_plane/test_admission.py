"""decision/admission.py: shed only under overload, only what load (not the request itself)
keeps from its budget, and sheddable classes before they eat the critical class's headroom."""

from __future__ import annotations

import random

import pytest

from contracts.policy import PriorityClass
from data_plane.decision.admission import Shed, admit
from data_plane.decision.choose import choose_route
from data_plane.domain import Budget, BudgetMode, HealthView, NoRoute, RouteDecision, RouteReason
from tests.unit.data_plane.admission_fleet import (
    BATCH,
    BUDGET,
    BURST,
    CRITICAL,
    FP16,
    INT4,
    ONE_X,
    STANDARD,
    bench_fleet,
    fleet,
    request,
)

FULL = {INT4: 8.0, FP16: 8.0}


def decide(
    load: dict[str, float],
    offered: float,
    priority: tuple[str, PriorityClass],
    budget: Budget = BUDGET,
) -> tuple[RouteDecision | NoRoute, Shed | RouteDecision | NoRoute]:
    t, req = bench_fleet(), request(budget)
    health = HealthView(load=load)
    result = choose_route(t, req, health, random.Random(1))
    return result, admit(t, req, health, result, priority, fleet(load, offered, budget=budget))


def test_under_overload_a_budget_missed_only_because_of_load_is_shed_with_the_drain_time() -> None:
    # Both pairs at 8: 0.42 s > 0.4 s now, 0.18 s unloaded. 7 in flight fit beside it, so
    # one of the 8 must finish, at 8 / 0.39 s a second: 0.39 / 8 = 48.75 ms.
    result, verdict = decide(FULL, BURST, STANDARD)
    assert isinstance(result, RouteDecision)
    assert result.reason.startswith("best_effort")  # what it got before admission
    assert isinstance(verdict, Shed)
    assert verdict.retry_after_s == pytest.approx(0.39 / 8)
    assert "'standard' is sheddable" in verdict.detail


def test_strict_mode_load_is_shed_too_not_a_400() -> None:
    budget = Budget(latency_s=0.4, mode=BudgetMode.STRICT)
    result, verdict = decide(FULL, BURST, STANDARD, budget)
    assert isinstance(result, NoRoute)
    assert isinstance(verdict, Shed)


def test_no_shedding_without_overload_even_at_full_concurrency() -> None:
    """At 1x (60% of what the fleet sustains) both pairs are now and then full at once: that
    moment drains by itself, and the request is served as decided (best effort here)."""
    for priority in (STANDARD, BATCH):
        result, verdict = decide(FULL, ONE_X, priority)
        assert verdict is result


def test_a_budget_no_pair_meets_even_unloaded_is_not_shed() -> None:
    # unloaded: 0.18 s > 0.1 s, so load is not what stands in the way
    for load in ({}, FULL):
        result, verdict = decide(load, BURST, STANDARD, Budget(latency_s=0.1))
        assert verdict is result


@pytest.mark.parametrize("load", [{}, {INT4: 4.0}, {INT4: 8.0, FP16: 4.0}])
def test_no_shedding_while_a_pair_has_room_within_the_class_share(load: dict[str, float]) -> None:
    result, verdict = decide(load, BURST, STANDARD)
    assert isinstance(result, RouteDecision)
    assert result.reason is RouteReason.CHEAPEST_FEASIBLE
    assert verdict is result


def test_a_critical_request_is_never_shed() -> None:
    for load in (FULL, {INT4: 7.0, FP16: 7.0}):
        result, verdict = decide(load, BURST, CRITICAL)
        assert verdict is result


def test_a_sheddable_class_leaves_the_critical_headroom_free() -> None:
    """Standard may fill 75% of a pair's sustainable 8 (6 with it), batch 50% (4): past that
    the pair is kept for the classes above, while a critical request still goes in."""
    crowded = {INT4: 6.0, FP16: 6.0}
    _, standard = decide(crowded, BURST, STANDARD)
    assert isinstance(standard, Shed)
    assert "75%" in standard.detail
    assert standard.retry_after_s == pytest.approx(0.33 / 6)  # one of 6 at 0.33 s each
    result, critical = decide(crowded, BURST, CRITICAL)
    assert critical is result
    assert isinstance(result, RouteDecision)
    assert result.candidates[0].pair.pair == "fam@int4"
    _, batch = decide({INT4: 4.0, FP16: 4.0}, BURST, BATCH)
    assert isinstance(batch, Shed)
    result, batch_fits = decide({INT4: 3.0, FP16: 4.0}, BURST, BATCH)
    assert batch_fits is result


def test_a_pair_within_the_class_share_goes_before_a_cheaper_one_past_it() -> None:
    result, verdict = decide({INT4: 6.0, FP16: 2.0}, BURST, STANDARD)
    assert isinstance(result, RouteDecision)
    assert result.candidates[0].pair.pair == "fam@int4"
    assert isinstance(verdict, RouteDecision)
    assert [c.pair.pair for c in verdict.candidates] == ["fam@fp16", "fam@int4"]
    assert verdict.reason is result.reason


def test_without_a_fleet_nothing_is_shed() -> None:
    t, req = bench_fleet(), request()
    health = HealthView(load=FULL)
    result = choose_route(t, req, health, random.Random(1))
    assert admit(t, req, health, result, STANDARD, None) is result
