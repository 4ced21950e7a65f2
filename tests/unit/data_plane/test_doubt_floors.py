"""Doubt that is really conservative (issue 24, docs/classifier.md "Doubt is conservative"):
an abstaining request is served only by a pair that meets every plausible category's floor
in that category's own accuracy column."""

from __future__ import annotations

import random
from typing import Any

from data_plane.decision.choose import choose_route, effective_limits
from data_plane.decision.compile import compile_table
from data_plane.decision.explain import explain_request
from data_plane.decision.relaxed import latency_relaxed
from data_plane.domain import (
    Budget,
    BudgetMode,
    CategoryDoubt,
    CompiledTable,
    HealthView,
    NoRoute,
    Rejection,
    RequestFacts,
    RouteDecision,
    RouteReason,
    RouteRequest,
)
from tests.unit.data_plane.tables import entry, table

FLOORS = {"categories": {"chat": {"min_accuracy": 0.86}, "reasoning": {"min_accuracy": 0.55}}}
# The issue's case: the classifier thinks reasoning (p 0.53) but cannot rule out chat, whose
# floor is stricter, so the request is routed as chat.
DOUBT = CategoryDoubt("reasoning", 0.53, ("reasoning", "chat"), "chat")


def _measured(e: dict[str, Any], counts: dict[str, tuple[int, float]]) -> dict[str, Any]:
    """`e` with (right of 100, lower bound) per category, as a control plane with bounds
    writes it."""
    e["accuracy"] = {c: right / 100 for c, (right, _) in counts.items()}
    e["accuracy_n"] = dict.fromkeys(counts, 100)
    e["accuracy_right"] = {c: right for c, (right, _) in counts.items()}
    e["accuracy_bound"] = {c: bound for c, (_, bound) in counts.items()}
    e["utility"] = dict.fromkeys(counts, 1.0)
    return e


def fleet(policy: dict[str, Any] | None = None) -> CompiledTable:
    cheap = entry("small", "int4", input_usd_per_mtok=0.1, output_usd_per_mtok=0.2)
    dear = entry("big", "bf16", input_usd_per_mtok=1.0, output_usd_per_mtok=2.0, tpot_base_s=0.05)
    return compile_table(
        table(
            [
                # meets chat's floor in the chat column, not reasoning's in its own
                _measured(cheap, {"chat": (93, 0.872), "reasoning": (60, 0.517)}),
                _measured(dear, {"chat": (95, 0.903), "reasoning": (70, 0.619)}),
            ],
            policy=policy or FLOORS,
        )
    )


def _route(
    t: CompiledTable, doubt: CategoryDoubt | None = DOUBT, **budget: Any
) -> RouteDecision | NoRoute:
    category = "chat" if doubt is None else doubt.routed_as
    facts = RequestFacts("auto", category, 0.5, 400, 100, doubt=doubt)
    return choose_route(t, RouteRequest(facts, Budget(**budget)), HealthView(), random.Random(0))


def _decided(result: RouteDecision | NoRoute) -> RouteDecision:
    assert isinstance(result, RouteDecision), result
    return result


def test_the_issues_reasoning_chat_case_goes_to_a_pair_meeting_both_floors() -> None:
    d = _decided(_route(fleet()))
    assert d.reason is RouteReason.CHEAPEST_FEASIBLE
    assert d.candidates[0].pair.pair == "big@bf16"
    assert d.doubt_floors == (("reasoning", 0.55),)
    rejected = {r.pair: r for r in d.rejected}
    assert rejected["small@int4"].reason is Rejection.BELOW_FLOOR
    assert rejected["small@int4"].detail == (
        "below floor 0.55 at 90% confidence on reasoning: 60/100 = 0.60, lower bound 0.517 "
        "(reasoning is plausible: the classifier was unsure)"
    )


def test_a_sure_classification_checks_only_its_own_column() -> None:
    d = _decided(_route(fleet(), doubt=None))
    assert d.candidates[0].pair.pair == "small@int4"
    assert d.doubt_floors == ()


def test_the_header_floor_applies_in_every_plausible_column() -> None:
    t = fleet()
    # 0.60 in both columns: the reasoning bound 0.619 of big@bf16 meets it, small's 0.517 not
    d = _decided(_route(t, min_accuracy=0.6))
    assert d.candidates[0].pair.pair == "big@bf16"
    assert d.doubt_floors == (("reasoning", 0.6),)
    strict = _route(t, min_accuracy=0.65, mode=BudgetMode.STRICT)
    assert isinstance(strict, NoRoute)
    assert strict.binding is Rejection.BELOW_FLOOR


def test_the_policys_doubt_category_is_checked_alone() -> None:
    t = fleet({**FLOORS, "doubt_category": "chat"})
    d = _decided(_route(t))
    assert d.candidates[0].pair.pair == "small@int4"
    assert d.doubt_floors == ()


def test_a_plausible_category_the_table_does_not_know_counts_as_the_default() -> None:
    t = fleet({**FLOORS, "default_category": "reasoning"})
    doubt = CategoryDoubt("poetry", 0.5, ("poetry", "chat"), "chat")
    facts = RequestFacts("auto", "chat", 0.5, 400, 100, doubt=doubt)
    limits = effective_limits(t, RouteRequest(facts, Budget()))
    assert limits.doubt_floors == (("reasoning", 0.55),)


def test_the_latency_relaxed_retry_keeps_the_doubt_floors() -> None:
    t = fleet()
    d = _decided(_route(t, latency_s=60.0))
    assert d.candidates[0].pair.pair == "big@bf16"
    # big@bf16 failed: small@int4 meets chat's floor but not reasoning's, so nothing is left
    assert latency_relaxed(t, d, HealthView(), random.Random(0)) is None


def test_route_explains_the_doubt_floors() -> None:
    t = fleet()
    facts = RequestFacts("auto", "chat", 0.5, 400, 100, doubt=DOUBT)
    body = explain_request(_route(t), t, facts)
    assert body["budget"]["doubt_floors"] == {"reasoning": 0.55}
    assert "a pair serves only if it also meets reasoning 0.55 in those columns" in body["summary"]
