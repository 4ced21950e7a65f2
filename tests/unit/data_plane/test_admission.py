"""decision/admission.py: shed only what load (not the request itself) keeps from its budget."""

from __future__ import annotations

import random

import pytest

from contracts.policy import PriorityClass
from data_plane.decision.admission import Shed, admit
from data_plane.decision.choose import choose_route
from data_plane.decision.compile import compile_table
from data_plane.domain import (
    Budget,
    BudgetMode,
    CompiledTable,
    HealthView,
    NoRoute,
    RequestFacts,
    RouteDecision,
    RouteReason,
    RouteRequest,
)
from tests.unit.data_plane.tables import entry, table

# 800 chars = 200 tokens on the pair, 50 output tokens: predicted latency at load L (this
# request included) is 0.05 + 0.02 + 0.1 L + 50 x (0.01 + 0.001 L) = 0.57 + 0.15 L.
FACTS = RequestFacts("auto", "chat", 0.2, 800, 50)
STANDARD = ("standard", PriorityClass(share=1.0, sheddable=True))
CRITICAL = ("critical", PriorityClass(share=1.0, sheddable=False))
BATCH = ("batch", PriorityClass(share=0.5, sheddable=True))
ENDPOINT = "a@int4#0"


def one_pair(endpoints: int = 1) -> CompiledTable:
    pair = entry("a", "int4", endpoints=endpoints, ttft_per_load_s=0.1, tpot_per_load_s=0.001)
    return compile_table(table([pair]))


def decide(
    t: CompiledTable, budget: Budget, load: dict[str, float], priority: tuple[str, PriorityClass]
) -> tuple[RouteDecision | NoRoute, Shed | None]:
    req = RouteRequest(FACTS, budget)
    health = HealthView(load=load)
    result = choose_route(t, req, health, random.Random(1))
    return result, admit(t, req, health, result, priority, random.Random(1))


def test_a_budget_missed_only_because_of_load_is_shed_with_the_drain_time() -> None:
    # 10 in flight: 0.57 + 0.15 x 11 = 2.22 s > 1.5 s; unloaded 0.72 s fits. It fits beside
    # at most 5 in flight, so 5 must finish, each taking 0.07 + 0.1 x 10 + 50 x 0.02 = 2.07 s
    # with 10 sharing the engine: 5 x 2.07 / 10 = 1.035 s.
    result, shed = decide(one_pair(), Budget(latency_s=1.5), {ENDPOINT: 10}, STANDARD)
    assert isinstance(result, RouteDecision)
    assert result.reason.startswith("best_effort")  # what it got before admission
    assert shed is not None
    assert shed.retry_after_s == pytest.approx(1.035)
    assert "'standard' is sheddable" in shed.detail


def test_strict_mode_load_is_shed_too_not_a_400() -> None:
    budget = Budget(latency_s=1.5, mode=BudgetMode.STRICT)
    result, shed = decide(one_pair(), budget, {ENDPOINT: 10}, STANDARD)
    assert isinstance(result, NoRoute)
    assert shed is not None


def test_a_budget_no_pair_meets_even_unloaded_is_not_shed() -> None:
    # unloaded: 0.72 s > 0.5 s, so load is not what stands in the way
    for load in ({}, {ENDPOINT: 10.0}):
        result, shed = decide(one_pair(), Budget(latency_s=0.5), load, STANDARD)
        assert not (
            isinstance(result, RouteDecision) and result.reason is RouteReason.CHEAPEST_FEASIBLE
        )
        assert shed is None


@pytest.mark.parametrize("load", [{}, {ENDPOINT: 5.0}])
def test_no_shedding_while_a_pair_still_meets_the_budget(load: dict[str, float]) -> None:
    # 5 in flight: 0.57 + 0.15 x 6 = 1.47 s <= 1.5 s
    result, shed = decide(one_pair(), Budget(latency_s=1.5), load, STANDARD)
    assert isinstance(result, RouteDecision)
    assert result.reason is RouteReason.CHEAPEST_FEASIBLE
    assert shed is None


def test_one_free_endpoint_is_spare_capacity() -> None:
    load = {"a@int4#0": 30.0, "a@int4#1": 0.0}
    result, shed = decide(one_pair(endpoints=2), Budget(latency_s=1.5), load, STANDARD)
    assert isinstance(result, RouteDecision)
    assert shed is None


def test_a_class_that_is_not_sheddable_is_served_as_decided() -> None:
    result, shed = decide(one_pair(), Budget(latency_s=1.5), {ENDPOINT: 10}, CRITICAL)
    assert isinstance(result, RouteDecision)
    assert shed is None


def test_a_class_past_its_share_of_the_profiled_concurrency_is_shed() -> None:
    # No latency budget: every load up to the profiled 64 is feasible. Batch may fill 32.
    budget = Budget(latency_s=1000.0)
    _, under = decide(one_pair(), budget, {ENDPOINT: 31}, BATCH)
    _, over = decide(one_pair(), budget, {ENDPOINT: 40}, BATCH)
    _, standard = decide(one_pair(), budget, {ENDPOINT: 40}, STANDARD)
    assert under is None
    assert standard is None
    assert over is not None
    assert "50%" in over.detail
    assert over.retry_after_s > 0


def test_an_unknown_model_is_never_shed() -> None:
    req = RouteRequest(RequestFacts("nope", "chat", 0.2, 800, 50), Budget(latency_s=1.5))
    health = HealthView(load={ENDPOINT: 10})
    t = one_pair()
    result = choose_route(t, req, health, random.Random(1))
    assert isinstance(result, NoRoute)
    assert admit(t, req, health, result, STANDARD, random.Random(1)) is None
