"""decision/choose.py: docs/design.md, "Routing semantics", table-driven, plus hypothesis
properties."""

from __future__ import annotations

import math
import random
from dataclasses import replace
from typing import Any

import pytest

from data_plane.decision.choose import choose_route, effective_limits, order_endpoints
from data_plane.decision.compile import compile_table
from data_plane.domain import (
    Budget,
    BudgetMode,
    CompiledEndpoint,
    CompiledTable,
    HealthView,
    NoRoute,
    NoRouteReason,
    Rejection,
    RequestFacts,
    RouteDecision,
    RouteReason,
    RouteRequest,
)
from tests.unit.data_plane.tables import entry, table

# Easy numbers: 4 chars per token, ttft = 0.1 + 0.1 * load, tpot = 0.01 + 0.001 * load,
# so 100 output tokens at load 1 take 0.2 + 1.1 = 1.3 s.
_LAT: dict[str, Any] = {
    "ttft_base_s": 0.1,
    "ttft_per_input_token_s": 0.0,
    "ttft_per_load_s": 0.1,
    "tpot_base_s": 0.01,
    "tpot_per_load_s": 0.001,
}


def simple(policy: dict[str, object] | None = None) -> CompiledTable:
    return compile_table(
        table(
            [
                entry(
                    "a",
                    "int4",
                    input_usd_per_mtok=1,
                    output_usd_per_mtok=2,
                    accuracy=0.7,
                    precision_rank=2,
                    endpoints=2,
                    **_LAT,
                ),
                entry(
                    "a",
                    "fp8",
                    input_usd_per_mtok=2,
                    output_usd_per_mtok=4,
                    accuracy=0.85,
                    precision_rank=1,
                    **_LAT,
                ),
                entry(
                    "a",
                    "bf16",
                    input_usd_per_mtok=4,
                    output_usd_per_mtok=8,
                    accuracy=0.9,
                    **{**_LAT, "tpot_base_s": 0.02},
                ),
                entry(
                    "b",
                    "bf16",
                    input_usd_per_mtok=8,
                    output_usd_per_mtok=16,
                    accuracy=0.95,
                    context_length=32768,
                    **{**_LAT, "tpot_base_s": 0.03},
                ),
            ],
            policy=policy,
        )
    )


def route(
    t: CompiledTable,
    *,
    alias: str = "auto",
    category: str = "chat",
    input_chars: int = 400,
    max_out: int | None = 100,
    health: HealthView | None = None,
    seed: int = 0,
    **budget: object,
) -> RouteDecision | NoRoute:
    facts = RequestFacts(alias, category, 0.5, input_chars, max_out)
    req = RouteRequest(facts, Budget(**budget))  # type: ignore[arg-type]
    return choose_route(t, req, health or HealthView(), random.Random(seed))


def decided(result: RouteDecision | NoRoute) -> RouteDecision:
    assert isinstance(result, RouteDecision), result
    return result


def pairs_of(result: RouteDecision | NoRoute) -> list[str]:
    return [c.pair.pair for c in decided(result).candidates]


def rejected_of(result: RouteDecision | NoRoute) -> dict[str, Rejection]:
    return {r.pair: r.reason for r in result.rejected}


def test_no_budget_picks_the_cheapest_and_chains_the_rest() -> None:
    d = decided(route(simple()))
    assert pairs_of(d) == ["a@int4", "a@fp8", "a@bf16", "b@bf16"]
    assert d.reason is RouteReason.CHEAPEST_FEASIBLE
    first = d.candidates[0]
    assert (first.input_tokens, first.output_tokens) == (100, 100)
    assert first.predicted_ttft_s == pytest.approx(0.2)
    assert first.predicted_latency_s == pytest.approx(1.3)
    assert first.estimated_cost_usd == pytest.approx((100 * 1 + 100 * 2) / 1e6)
    assert first.load == 1.0
    assert d.rejected == ()
    assert (d.alias, d.input_chars, d.mode, d.category) == (
        "auto",
        400,
        BudgetMode.BEST_EFFORT,
        "chat",
    )


def test_unknown_model() -> None:
    result = route(simple(), alias="gpt-4")
    assert isinstance(result, NoRoute)
    assert result.reason is NoRouteReason.UNKNOWN_MODEL
    assert "gpt-4" in result.detail


def test_accuracy_floor() -> None:
    d = decided(route(simple(), min_accuracy=0.8))
    assert pairs_of(d) == ["a@fp8", "a@bf16", "b@bf16"]
    (r,) = d.rejected
    assert (r.pair, r.reason) == ("a@int4", Rejection.BELOW_FLOOR)
    assert r.detail == "accuracy 0.700 on chat < floor 0.800"
    assert d.min_accuracy == 0.8


def test_latency_budget_words() -> None:
    # a@bf16: 0.2 + 100 * 0.021 = 2.3 s; b@bf16: 0.2 + 100 * 0.031 = 3.3 s
    d = decided(route(simple(), latency_s=2.0))
    assert pairs_of(d) == ["a@int4", "a@fp8"]
    details = {r.pair: r.detail for r in d.rejected}
    assert details["a@bf16"] == "predicted 2.30 s > budget 2.00 s at load 1"
    assert rejected_of(d)["b@bf16"] is Rejection.TOO_SLOW
    assert d.budget_latency_s == 2.0


def test_ttft_budget() -> None:
    busy = HealthView(load={"a@int4#0": 5, "a@int4#1": 5})  # ttft 0.1 + 0.1 * 6 = 0.7 s
    d = decided(route(simple(), ttft_s=0.5, health=busy))
    assert "a@int4" not in pairs_of(d)
    (r,) = d.rejected
    assert r.detail == "predicted TTFT 0.70 s > TTFT budget 0.50 s at load 6"
    assert d.budget_ttft_s == 0.5


def test_context_length_is_checked_before_floor() -> None:
    # 40000 chars = 10000 input tokens + 100 output > 8192 context on every "a" pair
    d = decided(route(simple(), input_chars=40_000, min_accuracy=0.99))
    assert d.reason is RouteReason.FLOOR_RELAXED
    reasons = rejected_of(d)
    assert reasons["a@int4"] is Rejection.CONTEXT_TOO_LONG
    assert reasons["b@bf16"] is Rejection.BELOW_FLOOR
    assert pairs_of(d) == ["b@bf16"]
    detail = next(r.detail for r in d.rejected if r.pair == "a@int4")
    assert detail == "needs 10000 input + 100 output = 10100 tokens > context 8192"


def test_cost_ceiling() -> None:
    # a@int4 costs 300e-6 for 100 in + 100 out; a@fp8 600e-6
    d = decided(route(simple(), max_cost_usd=0.0005))
    assert pairs_of(d) == ["a@int4"]
    assert rejected_of(d) == {
        "a@fp8": Rejection.TOO_EXPENSIVE,
        "a@bf16": Rejection.TOO_EXPENSIVE,
        "b@bf16": Rejection.TOO_EXPENSIVE,
    }
    assert "estimated $0.0006 > ceiling $0.0005" in d.rejected[0].detail
    assert d.max_cost_usd == 0.0005


def test_load_raises_predicted_latency_and_uses_the_less_loaded_endpoint() -> None:
    health = HealthView(load={"a@int4#0": 9, "a@int4#1": 3})
    for seed in range(10):
        first = decided(route(simple(), health=health, seed=seed)).candidates[0]
        assert [e.id for e in first.endpoints] == ["a@int4#1", "a@int4#0"]
        assert first.load == 4
        assert first.predicted_latency_s == pytest.approx(0.1 + 0.4 + 100 * (0.01 + 0.004))


def test_open_endpoints_are_never_candidates() -> None:
    health = HealthView(open_endpoints=frozenset({"a@int4#0"}), load={"a@int4#1": 50})
    d = decided(route(simple(), health=health))
    assert [e.id for e in d.candidates[0].endpoints] == ["a@int4#1"]
    assert d.candidates[0].load == 51


def test_pair_with_every_endpoint_open_is_rejected() -> None:
    health = HealthView(open_endpoints=frozenset({"a@int4#0", "a@int4#1"}))
    d = decided(route(simple(), health=health))
    assert pairs_of(d) == ["a@fp8", "a@bf16", "b@bf16"]
    (r,) = d.rejected
    assert (r.reason, r.detail) == (
        Rejection.BREAKER_OPEN,
        "all 2 endpoint(s) ejected by their breakers",
    )


def test_all_unhealthy() -> None:
    t = simple()
    every = frozenset(e.id for p in t.pairs for e in p.endpoints)
    result = route(t, health=HealthView(open_endpoints=every))
    assert isinstance(result, NoRoute)
    assert result.reason is NoRouteReason.ALL_UNHEALTHY
    assert len(result.rejected) == 4
    # only the allowed pairs matter
    family = route(t, alias="a", health=HealthView(open_endpoints=every - {"b@bf16#0"}))
    assert isinstance(family, NoRoute)
    assert family.reason is NoRouteReason.ALL_UNHEALTHY
    assert rejected_of(family)["b@bf16"] is Rejection.NOT_ALLOWED


def test_family_and_pinned_aliases() -> None:
    t = simple()
    d = decided(route(t, alias="a"))
    assert pairs_of(d) == ["a@int4", "a@fp8", "a@bf16"]
    assert rejected_of(d) == {"b@bf16": Rejection.NOT_ALLOWED}
    assert d.rejected[0].detail == "not served under model 'a'"
    pinned = decided(route(t, alias="a@fp8", min_accuracy=0.99))
    assert pairs_of(pinned) == ["a@fp8"]  # best-effort still serves the pinned pair
    assert pinned.reason is RouteReason.FLOOR_RELAXED
    assert pinned.alias == "a@fp8"


def _two_category_table() -> CompiledTable:
    return compile_table(
        table(
            [
                entry("a", "int4", accuracy={"chat": 0.9, "code": 0.5}, input_usd_per_mtok=0.1),
                entry("a", "bf16", accuracy={"chat": 0.9, "code": 0.9}, input_usd_per_mtok=0.5),
            ],
            policy={"categories": {"chat": {}, "code": {"min_accuracy": 0.8}, "math": {}}},
        )
    )


def test_category_defaults_follow_the_classifier() -> None:
    t = _two_category_table()
    assert pairs_of(route(t, category="chat")) == ["a@int4", "a@bf16"]
    assert pairs_of(route(t, category="code")) == ["a@bf16"]


def test_budget_category_beats_the_classifier() -> None:
    t = _two_category_table()
    facts = RequestFacts("auto", "chat", 0.1, 100, 10)
    req = RouteRequest(facts, Budget(category="code"))
    d = decided(choose_route(t, req, HealthView(), random.Random(0)))
    assert d.category == "code"
    assert pairs_of(d) == ["a@bf16"]


def test_unknown_category_uses_the_default_category() -> None:
    t = _two_category_table()
    facts = RequestFacts("auto", "poetry", 0.1, 100, 10)
    req = RouteRequest(facts, Budget(category="limericks"))
    d = decided(choose_route(t, req, HealthView(), random.Random(0)))
    assert d.category == "chat"


def test_unmeasured_category_counts_as_accuracy_zero() -> None:
    d = decided(route(_two_category_table(), category="math", min_accuracy=0.1))
    assert d.category == "math"
    assert d.reason is RouteReason.FLOOR_RELAXED
    assert d.rejected[0].detail == "accuracy 0.000 on math < floor 0.100"


def test_policy_defaults_apply_without_headers() -> None:
    t = simple(
        policy={
            "budget_mode": "strict",
            "categories": {
                "chat": {
                    "min_accuracy": 0.8,
                    "latency_budget_s": 2.0,
                    "typical_output_tokens": 100,
                    "ttft_budget_s": 1.0,
                }
            },
        }
    )
    d = decided(route(t, max_out=None))
    assert pairs_of(d) == ["a@fp8"]
    assert (d.min_accuracy, d.budget_latency_s, d.budget_ttft_s, d.mode) == (
        0.8,
        2.0,
        1.0,
        BudgetMode.STRICT,
    )
    assert d.candidates[0].output_tokens == 100
    # headers override the defaults
    d2 = decided(
        route(t, max_out=None, min_accuracy=0.0, latency_s=10.0, mode=BudgetMode.BEST_EFFORT)
    )
    assert pairs_of(d2)[0] == "a@int4"
    assert d2.mode is BudgetMode.BEST_EFFORT


def test_typical_output_tokens_when_max_tokens_absent() -> None:
    d = decided(route(simple(), max_out=None))
    assert d.candidates[0].output_tokens == 256


def test_input_tokens_round_up_per_family() -> None:
    t = compile_table(table([entry("a", "bf16", chars_per_token=3.0)]))
    assert decided(route(t, input_chars=10)).candidates[0].input_tokens == 4
    assert decided(route(t, input_chars=0)).candidates[0].input_tokens == 0


def test_choice_is_by_estimated_cost_not_table_order() -> None:
    # cheap output, dear input: last in reference order, but cheapest for long prompts with
    # short answers
    t = compile_table(
        table(
            [
                entry("a", "x", input_usd_per_mtok=1.0, output_usd_per_mtok=1.0),
                entry("b", "y", input_usd_per_mtok=0.1, output_usd_per_mtok=10.0),
            ]
        )
    )
    assert [p.pair for p in t.pairs] == ["a@x", "b@y"]
    assert pairs_of(route(t, input_chars=20_000, max_out=1)) == ["b@y", "a@x"]
    assert pairs_of(route(t, input_chars=4, max_out=1000)) == ["a@x", "b@y"]


def test_ties_break_on_latency_then_order() -> None:
    t = compile_table(
        table(
            [
                entry("a", "slow", tpot_base_s=0.05),
                entry("b", "fast", tpot_base_s=0.01),
                entry("c", "same", tpot_base_s=0.01),
            ]
        )
    )
    assert pairs_of(route(t)) == ["b@fast", "c@same", "a@slow"]


def test_strict_infeasible_names_the_binding_constraint() -> None:
    # floor 0.8 rules out a@int4 (rule 3); latency 1.2 s rules out the rest (rule 4)
    result = route(simple(), min_accuracy=0.8, latency_s=1.2, mode=BudgetMode.STRICT)
    assert isinstance(result, NoRoute)
    assert result.reason is NoRouteReason.BUDGET_INFEASIBLE
    assert result.binding is Rejection.TOO_SLOW
    assert "the latency budget, which rules out 3 pair(s), e.g. a@fp8" in result.detail
    assert len(result.rejected) == 4


def test_strict_binding_is_the_rule_the_furthest_pairs_failed() -> None:
    result = route(simple(), input_chars=40_000, min_accuracy=0.99, mode=BudgetMode.STRICT)
    assert isinstance(result, NoRoute)
    assert result.binding is Rejection.BELOW_FLOOR  # b@bf16 got past context, failed the floor


def test_best_effort_relaxes_latency_keeping_the_floor() -> None:
    # No latency spread in this table: every prediction over 1 s misses for sure (chance
    # 0), so the ties go to the pairs that keep the floor, fastest first, then the rest.
    d = decided(route(simple(), min_accuracy=0.8, latency_s=1.0))
    assert d.reason is RouteReason.LATENCY_RELAXED
    assert pairs_of(d) == ["a@fp8", "a@bf16", "b@bf16", "a@int4"]
    lat = [c.predicted_latency_s for c in d.candidates[:3]]
    assert lat == sorted(lat)
    assert [c.chance.floor_proven for c in d.candidates if c.chance] == [True] * 3 + [False]


def test_best_effort_relaxes_the_floor_last() -> None:
    d = decided(route(simple(), min_accuracy=0.99, latency_s=0.5))
    assert d.reason is RouteReason.UNPROVEN  # neither the floor nor the latency is proven
    assert pairs_of(d) == ["b@bf16", "a@bf16", "a@fp8", "a@int4"]  # highest bound first
    d = decided(route(simple(), min_accuracy=0.99))
    assert d.reason is RouteReason.FLOOR_RELAXED  # no latency budget: only the floor


def test_best_effort_never_relaxes_the_cost_ceiling() -> None:
    # too slow and too expensive: not a latency-relaxed candidate
    d = decided(route(simple(), latency_s=1.0, max_cost_usd=0.0005))
    assert d.reason is RouteReason.LATENCY_RELAXED
    assert pairs_of(d) == ["a@int4"]
    result = route(simple(), max_cost_usd=0.00001)
    assert isinstance(result, NoRoute)
    assert result.reason is NoRouteReason.BUDGET_INFEASIBLE
    assert result.binding is Rejection.TOO_EXPENSIVE


def test_best_effort_never_relaxes_the_context_length() -> None:
    result = route(simple(), input_chars=200_000)
    assert isinstance(result, NoRoute)
    assert result.binding is Rejection.CONTEXT_TOO_LONG
    assert result.mode is BudgetMode.BEST_EFFORT
    assert "maximum context length is" in result.detail  # OpenAI's words, for client libraries


def test_breaker_open_pairs_do_not_count_towards_the_binding_rule() -> None:
    health = HealthView(open_endpoints=frozenset({"b@bf16#0"}))
    result = route(simple(), min_accuracy=0.99, mode=BudgetMode.STRICT, health=health)
    assert isinstance(result, NoRoute)
    assert result.binding is Rejection.BELOW_FLOOR
    assert rejected_of(result)["b@bf16"] is Rejection.BREAKER_OPEN


def test_effective_limits() -> None:
    t = simple(policy={"categories": {"chat": {"latency_budget_s": 3.0}}})
    facts = RequestFacts("auto", "chat", 0.1, 100, None)
    limits = effective_limits(t, RouteRequest(facts, Budget(latency_s=1.0)))
    assert (limits.latency_s, limits.output_tokens, limits.mode) == (
        1.0,
        256,
        BudgetMode.BEST_EFFORT,
    )


def test_same_rng_state_same_decision() -> None:
    t = simple()
    assert route(t, seed=42) == route(t, seed=42)


# --- power of two choices -------------------------------------------------------------------


def _eps(n: int) -> tuple[CompiledEndpoint, ...]:
    return tuple(CompiledEndpoint(f"e{i}", f"http://h{i}") for i in range(n))


def test_single_endpoint_uses_no_randomness() -> None:
    rng = random.Random(1)
    state = rng.getstate()
    assert order_endpoints(_eps(1), {}, rng) == _eps(1)
    assert rng.getstate() == state


def test_two_endpoints_less_loaded_first() -> None:
    eps = _eps(2)
    for seed in range(20):
        assert order_endpoints(eps, {"e0": 5}, random.Random(seed)) == (eps[1], eps[0])


def test_two_endpoints_with_different_loads_use_no_randomness() -> None:
    rng = random.Random(1)
    state = rng.getstate()
    eps = _eps(2)
    assert order_endpoints(eps, {"e1": 0.5}, rng) == (eps[0], eps[1])
    assert order_endpoints(eps, {"e0": 0.5}, rng) == (eps[1], eps[0])
    assert rng.getstate() == state


def test_equal_load_order_is_random_but_seeded() -> None:
    eps = _eps(2)
    firsts = {order_endpoints(eps, {}, random.Random(seed))[0].id for seed in range(40)}
    assert firsts == {"e0", "e1"}


def test_many_endpoints_first_is_the_better_of_two_then_by_load() -> None:
    eps = _eps(5)
    load = {"e0": 4, "e1": 0, "e2": 3, "e3": 2, "e4": 1}
    seen = set()
    for seed in range(200):
        ordered = order_endpoints(eps, load, random.Random(seed))
        assert sorted(e.id for e in ordered) == [e.id for e in eps]
        rest = [load[e.id] for e in ordered[1:]]
        assert rest == sorted(rest)
        seen.add(ordered[0].id)
    # e0 (the most loaded) never wins a pairwise comparison; the rest sometimes do
    assert seen == {"e1", "e2", "e3", "e4"}


def test_endpoint_ids_only_from_the_pair() -> None:
    t = simple()
    d = decided(route(t))
    for c in d.candidates:
        assert {e.id for e in c.endpoints} <= {e.id for e in c.pair.endpoints}


def test_decision_is_replaced_not_changed() -> None:
    """Its fields are read-only to mypy (tests/unit/data_plane/test_per_request.py)."""
    d = decided(route(simple()))
    assert replace(d, alias="x").alias == "x"
    assert d.alias == "auto"
    assert math.isfinite(d.candidates[0].predicted_latency_s)


# --- the bounded scan and the lazy halves of a decision -------------------------------------


class RecordingLoad(dict[str, float]):
    """A load mapping that records which endpoint ids were read."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.read: list[str] = []

    def get(self, key: str, default: Any = None) -> Any:
        self.read.append(key)
        return super().get(key, default)


def _ladder(n: int = 6) -> CompiledTable:
    """n families of one pair each, each dearer than the one before, two endpoints apiece."""
    return compile_table(
        table(
            [
                entry(
                    f"f{i}",
                    "bf16",
                    endpoints=2,
                    input_usd_per_mtok=1.0 + i,
                    output_usd_per_mtok=2.0 + i,
                )
                for i in range(n)
            ]
        )
    )


def test_scan_stops_once_no_later_pair_can_be_cheaper() -> None:
    t = _ladder()
    load = RecordingLoad({"f0@bf16#0": 2.0, "f0@bf16#1": 3.0})
    d = decided(route(t, health=HealthView(load=load)))
    assert [e.id for e in d.candidates[0].endpoints] == ["f0@bf16#0", "f0@bf16#1"]
    assert load.read == ["f0@bf16#0", "f0@bf16#1"]  # the dearer pairs were never looked at
    # ...yet the chain is complete when read, cheapest first, at decision-time load
    assert pairs_of(d) == [f"f{i}@bf16" for i in range(6)]
    assert d.candidates[0].load == 3.0
    assert len(load.read) == 2  # completed from a copy of the loads


def test_reading_the_chain_later_sees_decision_time_loads_and_keeps_the_rng() -> None:
    t = _ladder()
    load = {"f3@bf16#0": 1.0, "f3@bf16#1": 1.0}  # a tie: reading f3 takes a random draw
    rng = random.Random(5)
    facts = RequestFacts("auto", "chat", 0.5, 400, 100)
    d = decided(choose_route(t, RouteRequest(facts, Budget()), HealthView(load=load), rng))
    state = rng.getstate()
    load["f3@bf16#0"] = load["f3@bf16#1"] = 40.0  # the world moves on before anyone reads
    assert d.candidates[3].load == 2.0
    assert rng.getstate() == state


def test_rejections_are_explained_with_decision_time_figures() -> None:
    # a@bf16 at load 1 + this request: 0.1 + 0.1 * 2 + 100 * (0.02 + 0.001 * 2) = 2.5 s
    t = simple()
    load = {"a@bf16#0": 1.0}
    d = decided(route(t, latency_s=1.45, health=HealthView(load=load)))
    load["a@bf16#0"] = 9.0
    details = {r.pair: r.detail for r in d.rejected}
    assert details["a@bf16"] == "predicted 2.50 s > budget 1.45 s at load 2"


def test_same_rng_state_same_chain_and_rejections_beyond_the_stop() -> None:
    t = _ladder(8)
    health = HealthView(load={f"f{i}@bf16#0": float(i % 3) for i in range(8)})
    one, two = route(t, health=health, seed=9), route(t, health=health, seed=9)
    assert one == two
    assert decided(one).rejected == decided(two).rejected
