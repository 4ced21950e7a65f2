"""Admission by budget: shed a sheddable request only while its fleet is overloaded, and then
before it eats the headroom kept for the classes above it (docs/data_plane.md, "Tenants,
priorities and admission").

PURE, beside `choose_route` and called after it with the request's fleet
(`capacity.fleet_of`). A request is served as decided unless all of these hold:

- its priority class is sheddable (a class that is not, critical by default, is never shed);
- some pair meets it unloaded (a request no pair meets even at zero load keeps today's
  handling: best effort, or a 400 naming the binding rule);
- its fleet is overloaded: this replica's recent arrivals at those pairs exceed what they
  sustain within the budget. Without overload nothing is shed: a moment at full concurrency
  drains by itself, and the request is served as decided (best effort if it must);

and then it is shed when no pair meets its budget at the load now (*because of load*), or
when every pair that does would carry more than the class's `share` of its sustainable
concurrency with this request: the rest is kept for the classes above it. A pair within the
class's share is preferred to a cheaper one past it (the decision's candidates reordered).

Retry-After is the predicted drain time: for the pair's endpoints, how long until enough of
the requests in flight finish for this one to fit (`drain_s`). What else could explain a
shed: the load figures include queued work scraped from engines and other replicas' counts,
so a stale scrape or share can over- or under-state the load for up to their intervals.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from itertools import islice

from contracts.policy import PriorityClass
from data_plane.decision.capacity import FLEET_PAIRS, Fleet, predicted_at
from data_plane.decision.feasibility import Limits, effective_limits
from data_plane.domain import (
    Candidate,
    CompiledTable,
    HealthView,
    NoRoute,
    NoRouteReason,
    RouteDecision,
    RouteReason,
    RouteRequest,
)

_FEASIBLE = frozenset({RouteReason.CHEAPEST_FEASIBLE, RouteReason.MOST_PRECISE_FEASIBLE})
_DRAIN_CANDIDATES = 4  # the pairs whose drain time is looked at (the cheapest first)


@dataclass(frozen=True, slots=True)
class Shed:
    """Refuse this request for now: why, and when a retry is predicted to fit."""

    retry_after_s: float
    detail: str


def admit(
    table: CompiledTable,
    req: RouteRequest,
    health: HealthView,
    result: RouteDecision | NoRoute,
    priority: tuple[str, PriorityClass],
    fleet: Fleet | None,
) -> Shed | RouteDecision | NoRoute:
    """`result` (or it with its candidates reordered) to serve, or the `Shed` (see the module
    docstring). `fleet`: the request's fleet, None when no pair meets it unloaded."""
    name, klass = priority
    if not klass.sheddable or fleet is None or not fleet.overloaded:
        return result
    limits = effective_limits(table, req)
    chars = req.facts.input_chars
    if isinstance(result, RouteDecision) and result.reason in _FEASIBLE:
        return _within_share(result, limits, chars, health, fleet, (name, klass.share))
    if isinstance(result, NoRoute) and result.reason is not NoRouteReason.BUDGET_INFEASIBLE:
        return result
    if isinstance(result, RouteDecision) and not result.reason.startswith("best_effort"):
        return result
    wait_s = min(
        drain_s(p.candidate, limits, chars, health, p.per_endpoint - 1.0)
        for p in islice(fleet.pairs, _DRAIN_CANDIDATES)
    )
    return Shed(
        wait_s,
        f"the fleet is overloaded: no pair meets this request's budget at its load now "
        f"({len(fleet.pairs)} would unloaded); priority class {name!r} is sheddable",
    )


def _within_share(
    decision: RouteDecision,
    limits: Limits,
    chars: int,
    health: HealthView,
    fleet: Fleet,
    klass: tuple[str, float],
) -> Shed | RouteDecision:
    """The decision with the candidates within the class's share of their sustainable
    concurrency first (unchanged when the first is), or the Shed when none is."""
    name, share = klass
    first = decision.candidates[0]
    if first.load <= share * fleet.sustainable(first.pair.pair):
        return decision  # the common case: no other candidate is built
    cands = decision.candidates[:FLEET_PAIRS]  # past the fleet a pair has no sustainable figure
    lines = [share * fleet.sustainable(c.pair.pair) for c in cands]
    within = [c for c, line in zip(cands, lines, strict=True) if c.load <= line]
    if within:
        rest = [c for c in decision.candidates if all(c is not w for w in within)]
        return replace(decision, candidates=(*within, *rest))
    wait_s = min(
        drain_s(c, limits, chars, health, math.floor(line) - 1.0)
        for c, line in islice(zip(cands, lines, strict=True), _DRAIN_CANDIDATES)
    )
    return Shed(
        wait_s,
        f"the fleet is overloaded and priority class {name!r} may fill {share:.0%} of a "
        "pair's sustainable concurrency: every pair that meets this request is past it",
    )


def drain_s(
    cand: Candidate, limits: Limits, input_chars: int, health: HealthView, fits: float
) -> float:
    """Predicted seconds until one of `cand`'s endpoints has at most `fits` requests in
    flight: the excess over the endpoints' present service rate (Little's law: L requests in
    flight, each taking the pair's predicted latency W at that load, finish at L / W a
    second). Its assumptions: nothing new arrives meanwhile, and answers run to their cap."""
    if fits < 0:
        return math.inf
    best = math.inf
    for endpoint in cand.endpoints:
        now = health.load.get(endpoint.id, 0.0)
        excess = now - fits
        if excess <= 0:
            return 0.0
        w = predicted_at(cand.pair, limits, input_chars, now)
        best = min(best, excess * w / now)
    return best
