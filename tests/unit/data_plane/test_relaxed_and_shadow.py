"""relaxed.py and rollout.shadow_without_route: the pure halves of issue 13 items 3 and 5."""

from __future__ import annotations

import random

from data_plane.decision.choose import choose_route
from data_plane.decision.compile import compile_table
from data_plane.decision.relaxed import idle_relaxed, latency_relaxed
from data_plane.decision.rollout import shadow_without_route
from data_plane.domain import (
    Budget,
    BudgetMode,
    CompiledTable,
    HealthView,
    NoRoute,
    NoRouteReason,
    RequestFacts,
    RouteDecision,
    RouteReason,
    RouteRequest,
)
from tests.unit.data_plane.tables import entry, table

FACTS = RequestFacts("auto", "chat", 0.2, 800, 50)


def fleet(policy: dict[str, object] | None = None) -> CompiledTable:
    """a@int4 fast and cheap (0.7); a@bf16 slow (1.5 s TTFT) and accurate (0.9); b@bf16 is
    fast but below any floor over 0.5."""
    return compile_table(
        table(
            [
                entry("a", "int4", input_usd_per_mtok=0.1, precision_rank=1, accuracy=0.7),
                entry("a", "bf16", input_usd_per_mtok=0.5, ttft_base_s=1.5, accuracy=0.9),
                entry("b", "bf16", input_usd_per_mtok=0.9, accuracy=0.5),
            ],
            policy=policy,
        )
    )


def route(t: CompiledTable, budget: Budget, health: HealthView | None = None) -> object:
    return choose_route(t, RouteRequest(FACTS, budget), health or HealthView(), random.Random(1))


def test_latency_relaxed_offers_the_slower_pairs_that_keep_the_floor() -> None:
    t = fleet()
    d = route(t, Budget(latency_s=1.0, min_accuracy=0.6))
    assert isinstance(d, RouteDecision)
    assert [c.pair.pair for c in d.candidates] == ["a@int4"]  # the only feasible pair
    relaxed = latency_relaxed(t, d, HealthView(), random.Random(1))
    assert relaxed is not None
    assert relaxed.reason is RouteReason.LATENCY_RELAXED
    assert [c.pair.pair for c in relaxed.candidates] == ["a@bf16"]  # not b@bf16 (0.5 < 0.6)
    assert relaxed.budget_latency_s == 1.0
    assert relaxed.min_accuracy == 0.6


def test_latency_relaxed_never_relaxes_the_floor_or_strict_mode_or_a_relaxed_decision() -> None:
    t = fleet()
    # Floor 0.8: a@int4 is below it, so only a@bf16 is feasible (no budget); nothing relaxed
    # may replace it without going under the floor.
    d = route(t, Budget(min_accuracy=0.8))
    assert isinstance(d, RouteDecision)
    assert latency_relaxed(t, d, HealthView(), random.Random(1)) is None
    strict = route(t, Budget(latency_s=1.0, min_accuracy=0.6, mode=BudgetMode.STRICT))
    assert isinstance(strict, RouteDecision)
    assert latency_relaxed(t, strict, HealthView(), random.Random(1)) is None
    relaxed = route(t, Budget(latency_s=0.001, min_accuracy=0.6))
    assert isinstance(relaxed, RouteDecision)
    assert relaxed.reason is RouteReason.LATENCY_RELAXED
    assert latency_relaxed(t, relaxed, HealthView(), random.Random(1)) is None


def test_latency_relaxed_skips_ejected_pairs() -> None:
    t = fleet()
    d = route(t, Budget(latency_s=1.0, min_accuracy=0.6))
    assert isinstance(d, RouteDecision)
    ejected = HealthView(frozenset({"a@bf16#0"}))
    assert latency_relaxed(t, d, ejected, random.Random(1)) is None


def idle(t: CompiledTable, budget: Budget, load: dict[str, float]) -> RouteDecision | None:
    return idle_relaxed(t, RouteRequest(FACTS, budget), HealthView(load=load), random.Random(1))


def test_idle_relaxed_serves_late_on_an_idle_pair_that_keeps_the_floor() -> None:
    t = fleet()
    budget = Budget(latency_s=1.0, min_accuracy=0.6)
    # a@int4, the only pair within the budget, is busy: a@bf16 (1.5 s TTFT) is idle and keeps
    # the floor; b@bf16 is idle too but below it, so it is not in the chain.
    d = idle(t, budget, {"a@int4#0": 3.0})
    assert d is not None
    assert d.reason is RouteReason.LATENCY_RELAXED
    assert [c.pair.pair for c in d.candidates] == ["a@bf16"]
    # a busy endpoint is never chosen, whatever its pair
    assert idle(t, budget, {"a@int4#0": 3.0, "a@bf16#0": 1.0}) is None
    # nor a pair a waiting request may go to: a slot that frees there is that request's
    req = RouteRequest(FACTS, budget)
    load = HealthView(load={"a@int4#0": 3.0})
    assert idle_relaxed(t, req, load, random.Random(1), frozenset({"a@bf16"})) is None
    # an idle fleet: what choose_route says (the pair within the budget)
    d = idle(t, budget, {})
    assert d is not None
    assert d.reason is RouteReason.CHEAPEST_FEASIBLE
    assert d.candidates[0].pair.pair == "a@int4"


def test_idle_relaxed_never_relaxes_the_floor_or_strict_mode() -> None:
    t = fleet()
    busy = {"a@int4#0": 3.0}
    assert idle(t, Budget(latency_s=1.0, min_accuracy=0.6, mode=BudgetMode.STRICT), busy) is None
    # floor 0.95: no pair proves it, so nothing is served in place of the refusal
    assert idle(t, Budget(latency_s=1.0, min_accuracy=0.95), {}) is None
    # ejected endpoints stay ejected
    ejected = HealthView(frozenset({"a@bf16#0"}), busy)
    req = RouteRequest(FACTS, Budget(latency_s=1.0, min_accuracy=0.6))
    assert idle_relaxed(t, req, ejected, random.Random(1)) is None


def test_shadow_serves_the_default_pair_when_the_router_would_refuse() -> None:
    t = fleet({"shadow": {"enabled": True, "default_pair": "b@bf16"}})
    budget = Budget(min_accuracy=0.99, mode=BudgetMode.STRICT)
    refused = route(t, budget)
    assert isinstance(refused, NoRoute)
    assert refused.reason is NoRouteReason.BUDGET_INFEASIBLE
    d = shadow_without_route(refused, t, RouteRequest(FACTS, budget))
    assert d is not None
    assert d.reason is RouteReason.SHADOW
    assert [c.pair.pair for c in d.candidates] == ["b@bf16"]
    assert d.adaptive is None
    assert d.min_accuracy == 0.99  # the client's budget is kept for accounting, not enforced


def test_shadow_without_route_leaves_unknown_models_and_excluded_pairs_alone() -> None:
    t = fleet({"shadow": {"enabled": True, "default_pair": "b@bf16"}})
    unknown = NoRoute(NoRouteReason.UNKNOWN_MODEL, "no such model")
    assert shadow_without_route(unknown, t, RouteRequest(FACTS, Budget())) is None
    pinned = RequestFacts("a", "chat", 0.2, 800, 50)  # family a: b@bf16 is not allowed
    refused = NoRoute(NoRouteReason.BUDGET_INFEASIBLE, "x")
    assert shadow_without_route(refused, t, RouteRequest(pinned, Budget())) is None
    off = fleet()
    assert shadow_without_route(refused, off, RouteRequest(FACTS, Budget())) is None
