"""Best-effort's last resort after the attempt walk: latency-relaxed pairs (PURE).

A feasible decision's chain holds only the pairs that meet the whole budget. When every one of
them failed (or is ejected), a best-effort request is not failed while slower pairs that keep
the accuracy floor and the cost ceiling are healthy: the decision is taken again with the
chain's pairs ejected, and only a latency-relaxed answer is accepted (docs/reliability.md).
"""

from __future__ import annotations

import random
from dataclasses import replace

from data_plane.decision.choose import Limits, choose_route
from data_plane.domain import (
    Budget,
    BudgetMode,
    CompiledTable,
    HealthView,
    RequestFacts,
    RouteDecision,
    RouteReason,
    RouteRequest,
)


def latency_relaxed(
    table: CompiledTable, decision: RouteDecision, health: HealthView, rng: random.Random
) -> RouteDecision | None:
    """The latency-relaxed decision for `decision`'s request with every pair of its chain
    ejected: best effort's chain (most likely to meet the request first) cut to the pairs
    whose floor is proven. None: strict mode, a decision that was already relaxed (its chain
    holds every pair best-effort would try), or no healthy slower pair within the floor and
    the cost."""
    if decision.mode is not BudgetMode.BEST_EFFORT:
        return None
    if decision.reason is not RouteReason.CHEAPEST_FEASIBLE:
        return None
    tried = {e.id for c in decision.candidates for e in c.pair.endpoints}
    facts = RequestFacts(
        alias=decision.alias,
        category=decision.category,
        complexity=decision.complexity,
        input_chars=decision.input_chars,
        max_output_tokens=decision.candidates[0].output_tokens,
    )
    limits = Limits(
        category=decision.category,
        output_tokens=decision.candidates[0].output_tokens,
        latency_s=decision.budget_latency_s,
        ttft_s=decision.budget_ttft_s,
        min_accuracy=decision.min_accuracy,
        max_cost_usd=decision.max_cost_usd,
        mode=decision.mode,
        doubt_floors=decision.doubt_floors,
    )
    ejected = HealthView(health.open_endpoints | tried, health.load)
    result = choose_route(table, RouteRequest(facts, Budget()), ejected, rng, limits)
    if not isinstance(result, RouteDecision) or result.reason is RouteReason.CHEAPEST_FEASIBLE:
        return None
    keep = tuple(c for c in result.candidates if c.chance is not None and c.chance.floor_proven)
    if not keep:
        return None
    return replace(result, candidates=keep, reason=RouteReason.LATENCY_RELAXED)
