"""Best effort's latency-relaxed pairs, where a best-effort request would otherwise fail (PURE).

After the attempt walk (`latency_relaxed`): a feasible decision's chain holds only the pairs
that meet the whole budget. When every one of them failed (or is ejected), a best-effort
request is not failed while slower pairs that keep the accuracy floor and the cost ceiling
are healthy: the decision is taken again with the chain's pairs ejected, and only a
latency-relaxed answer is accepted (docs/reliability.md).

Instead of a refusal by load (`idle_relaxed`): when every pair that meets a best-effort
request's budget is full and no wait its budget allows makes room, a pair that keeps its floor
and has an endpoint with nothing in flight serves it late rather than a 429: the decision is
taken again with every busy endpoint ejected, and the pairs other waiting requests may go to,
and only a decision whose floor is proven is accepted (docs/data_plane.md, "Flow control").
An idle endpoint no waiting request wants takes nothing from anyone's request, and the
request counts there at once, so one such placement per idle endpoint.
"""

from __future__ import annotations

import random
from dataclasses import replace

from data_plane.decision.choose import Limits, choose_route, effective_limits
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

_FEASIBLE = frozenset({RouteReason.CHEAPEST_FEASIBLE, RouteReason.MOST_PRECISE_FEASIBLE})


def idle_relaxed(
    table: CompiledTable,
    req: RouteRequest,
    health: HealthView,
    rng: random.Random,
    wanted: frozenset[str] = frozenset(),
) -> RouteDecision | None:
    """`req` decided on the endpoints with nothing in flight only (`health.load` 0, not
    ejected), of pairs not in `wanted` (those requests waiting in the queue may go to: a
    slot that frees there is theirs): that decision when it is feasible there, else best
    effort's chain cut to the pairs whose floor is proven (`_floor_kept`); None: strict
    mode, or no such idle pair proves the floor."""
    limits = effective_limits(table, req)
    if limits.mode is not BudgetMode.BEST_EFFORT:
        return None
    busy = frozenset(endpoint for endpoint, load in health.load.items() if load > 0.0)
    if wanted:
        held = (p.endpoints for p in table.pairs if p.pair in wanted)
        busy |= frozenset(e.id for endpoints in held for e in endpoints)
    idle = HealthView(health.open_endpoints | busy, health.load, health.ladder)
    result = choose_route(table, req, idle, rng, limits)
    if not isinstance(result, RouteDecision):
        return None
    return result if result.reason in _FEASIBLE else _floor_kept(result)


def _floor_kept(result: RouteDecision) -> RouteDecision | None:
    """A best-effort decision's chain cut to the candidates whose floor is proven, as a
    latency-relaxed decision (None: none is)."""
    keep = tuple(c for c in result.candidates if c.chance is not None and c.chance.floor_proven)
    if not keep:
        return None
    return replace(result, candidates=keep, reason=RouteReason.LATENCY_RELAXED)


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
    return _floor_kept(result)
