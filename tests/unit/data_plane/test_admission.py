"""decision/admission.py: refuse a sheddable request only while every pair that meets it
unloaded is full, counting what is in flight; the classes below keep headroom for those
above, never below one request per endpoint."""

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
    CRITICAL,
    FP16,
    INT4,
    STANDARD,
    bench_fleet,
    fleet,
    request,
)

FULL = {INT4: 8.0, FP16: 8.0}


def decide(
    load: dict[str, float],
    priority: tuple[str, PriorityClass],
    budget: Budget = BUDGET,
) -> tuple[RouteDecision | NoRoute, Shed | RouteDecision | NoRoute]:
    t, req = bench_fleet(), request(budget)
    health = HealthView(load=load)
    result = choose_route(t, req, health, random.Random(1))
    found = fleet(load, budget=budget, share=priority[1].share)
    return result, admit(t, req, health, result, priority, found)


def test_a_full_fleet_refuses_a_sheddable_request_with_the_drain_time() -> None:
    # Both pairs at 8: 0.42 s > 0.4 s now, 0.18 s unloaded. Standard may fill 6 of the 8,
    # so 3 of the 8 must finish, at 8 / 0.39 s a second: 3 x 0.39 / 8.
    result, verdict = decide(FULL, STANDARD)
    assert isinstance(result, RouteDecision)
    assert result.reason.startswith("best_effort")  # what it got before admission
    assert isinstance(verdict, Shed)
    assert verdict.retry_after_s == pytest.approx(3 * 0.39 / 8)
    assert "'standard'" in verdict.detail
    assert "full" in verdict.detail


def test_strict_mode_load_is_refused_too_not_a_400() -> None:
    budget = Budget(latency_s=0.4, mode=BudgetMode.STRICT)
    result, verdict = decide(FULL, STANDARD, budget)
    assert isinstance(result, NoRoute)
    assert isinstance(verdict, Shed)


def test_a_budget_no_pair_meets_even_unloaded_is_not_refused() -> None:
    # unloaded: 0.18 s > 0.1 s, so load is not what stands in the way
    for load in ({}, FULL):
        result, verdict = decide(load, STANDARD, Budget(latency_s=0.1))
        assert verdict is result


@pytest.mark.parametrize("load", [{}, {INT4: 4.0}, {INT4: 5.0, FP16: 8.0}])
def test_nothing_is_refused_while_a_pair_is_below_the_class_line(load: dict[str, float]) -> None:
    result, verdict = decide(load, STANDARD)
    assert isinstance(result, RouteDecision)
    assert result.reason is RouteReason.CHEAPEST_FEASIBLE
    assert verdict is result


def test_a_critical_request_is_never_refused() -> None:
    for load in (FULL, {INT4: 7.0, FP16: 7.0}):
        result, verdict = decide(load, CRITICAL)
        assert verdict is result


def test_a_sheddable_class_leaves_the_critical_headroom_free() -> None:
    """Once the fleet is pressed (its load with this request past the class's share of the
    16 it sustains), standard may fill 75% of a pair's sustainable 8 (6 with it), batch 50%
    (4): past that the pair is kept for the classes above, while a critical request still
    goes in."""
    crowded = {INT4: 6.0, FP16: 6.0}
    _, standard = decide(crowded, STANDARD)
    assert isinstance(standard, Shed)
    assert standard.retry_after_s == pytest.approx(0.33 / 6)  # one of 6 at 0.33 s each
    result, critical = decide(crowded, CRITICAL)
    assert critical is result
    assert isinstance(result, RouteDecision)
    assert result.candidates[0].pair.pair == "fam@int4"
    _, batch = decide({INT4: 4.0, FP16: 4.0}, BATCH)
    assert isinstance(batch, Shed)
    result, batch_fits = decide({INT4: 3.0, FP16: 4.0}, BATCH)
    assert batch_fits is result  # 8 with it: not past half of 16


def test_unpressed_a_class_fills_a_pair_to_its_sustainable_concurrency() -> None:
    """A cheap pair is not kept a quarter empty for critical traffic that is not there: with
    fp16 idle, standard fills int4 past its line of 6 (7 in flight, 8 with it)."""
    result, verdict = decide({INT4: 7.0}, STANDARD)
    assert isinstance(result, RouteDecision)
    assert result.candidates[0].pair.pair == "fam@int4"
    assert verdict is result


def test_the_class_line_is_at_least_one_request_per_endpoint() -> None:
    """Finding 1 of issue 32: a pair that meets a request only alone sustains 1, and 75% of
    1 refused it on an idle fleet. The line is at least 1: an idle pair takes it."""
    tight = Budget(latency_s=0.19)  # 0.18 s alone, 0.21 s beside one more
    result, verdict = decide({}, STANDARD, tight)
    assert isinstance(result, RouteDecision)
    assert verdict is result
    tiny = PriorityClass(share=0.01, sheddable=True)
    result, verdict = decide({}, ("tiny", tiny))
    assert verdict is result
    _, full = decide({INT4: 1.0, FP16: 1.0}, STANDARD, tight)
    assert isinstance(full, Shed)


def test_a_pair_below_the_class_line_goes_before_a_cheaper_one_past_it() -> None:
    """Pressed (13 of the 16 the fleet sustains, this one included, past 75%): standard
    stops at its line of 6, so fp16 (5) goes before int4 (7)."""
    result, verdict = decide({INT4: 7.0, FP16: 5.0}, STANDARD)
    assert isinstance(result, RouteDecision)
    assert result.candidates[0].pair.pair == "fam@int4"
    assert isinstance(verdict, RouteDecision)
    assert [c.pair.pair for c in verdict.candidates] == ["fam@fp16", "fam@int4"]
    assert verdict.reason is result.reason


def test_without_a_fleet_nothing_is_refused() -> None:
    t, req = bench_fleet(), request()
    health = HealthView(load=FULL)
    result = choose_route(t, req, health, random.Random(1))
    assert admit(t, req, health, result, STANDARD, None) is result
