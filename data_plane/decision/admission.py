"""Admission by budget: shed a sheddable request that only the fleet's current load keeps
from its budget (docs/data_plane.md, "Tenants, priorities and admission").

PURE, beside `choose_route` and called after it. A request is shed (429 with a Retry-After)
only when all of these hold:

- its priority class is sheddable;
- no pair meets the request at the load now (the decision is best-effort or a strict
  NoRoute), yet some pair meets it with the same healthy endpoints at zero load: the budget
  is missed *because of load*, and a later retry can succeed. A request no pair meets even at
  zero load keeps today's handling (best effort or a 400 naming the binding rule); a request
  some pair meets now is never shed for latency (spare capacity exists);
- or, for a class whose `share` is below 1: every feasible candidate's endpoint would carry
  more than `share` x the pair's profiled concurrency with this request (the rest of that
  concurrency is kept for the other classes).

Retry-After is the predicted drain time: for the pair's endpoints, how long until enough of
the requests in flight finish for this one to fit (`drain_s`). What else could explain a
shed: the load figures include queued work scraped from engines and other replicas' counts,
so a stale scrape or share can over- or under-state the load for up to their intervals.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from itertools import islice

from contracts.policy import PriorityClass
from data_plane.decision.choose import choose_route
from data_plane.decision.feasibility import Limits, effective_limits, input_tokens
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
    rng: random.Random,
) -> Shed | None:
    """None to serve `result` as decided, or the `Shed` (see the module docstring)."""
    name, klass = priority
    if not klass.sheddable:
        return None
    if isinstance(result, RouteDecision) and result.reason in _FEASIBLE:
        return _over_share(table, req, health, result, name, klass.share)
    if isinstance(result, NoRoute) and result.reason is not NoRouteReason.BUDGET_INFEASIBLE:
        return None
    if isinstance(result, RouteDecision) and not result.reason.startswith("best_effort"):
        return None
    idle = HealthView(open_endpoints=health.open_endpoints, ladder=health.ladder)
    at_rest = choose_route(table, req, idle, rng)
    if not isinstance(at_rest, RouteDecision) or at_rest.reason not in _FEASIBLE:
        return None  # inherent: no pair meets it even unloaded
    limits = effective_limits(table, req)
    chars = req.facts.input_chars
    cands = list(islice(at_rest.candidates, _DRAIN_CANDIDATES))
    wait_s = min(drain_s(c, limits, chars, health, _fits_budget(c, limits, chars)) for c in cands)
    return Shed(
        wait_s,
        f"the fleet is overloaded: no pair meets this request's budget at its load now "
        f"({len(at_rest.candidates)} would unloaded); priority class {name!r} is sheddable",
    )


def _over_share(
    table: CompiledTable,
    req: RouteRequest,
    health: HealthView,
    decision: RouteDecision,
    name: str,
    share: float,
) -> Shed | None:
    """Shed when every feasible candidate is past the class's share of its pair's profiled
    concurrency (only a class with share < 1; the first candidate is checked first, cheaply)."""
    if share >= 1.0 or decision.candidates[0].load <= _cap(decision.candidates[0], share):
        return None
    if any(c.load <= _cap(c, share) for c in decision.candidates):
        return None
    limits = effective_limits(table, req)
    chars = req.facts.input_chars
    cands = list(islice(decision.candidates, _DRAIN_CANDIDATES))
    wait_s = min(drain_s(c, limits, chars, health, math.floor(_cap(c, share)) - 1) for c in cands)
    return Shed(
        wait_s,
        f"priority class {name!r} may use {share:.0%} of a pair's profiled concurrency, and "
        "every pair that meets this request is past it",
    )


def _cap(cand: Candidate, share: float) -> float:
    return share * cand.pair.max_profiled_load


def _fits_budget(cand: Candidate, limits: Limits, input_chars: int) -> int:
    """The most requests in flight at one endpoint of `cand`'s pair beside which this one
    still meets its latency and TTFT budgets (the linear model of `feasibility.predict`
    solved for the load, capped by the highest profiled load); -1 when none."""
    pair = cand.pair
    ttft0 = pair.ttft_base_s + pair.ttft_per_input_token_s * input_tokens(pair, input_chars)
    out = limits.output_tokens
    most = pair.max_profiled_load - 1.0
    if limits.latency_s is not None:
        fixed = ttft0 + out * pair.tpot_base_s
        most = min(
            most,
            _solve(limits.latency_s - fixed, pair.ttft_per_load_s + out * pair.tpot_per_load_s),
        )
    if limits.ttft_s is not None:
        most = min(most, _solve(limits.ttft_s - ttft0, pair.ttft_per_load_s))
    return -1 if most < 0 else int(min(most, 1e9))


def _solve(room_s: float, per_load_s: float) -> float:
    """Largest outstanding count k with per_load_s x (k + 1) <= room_s."""
    if per_load_s <= 0:
        return math.inf if room_s >= 0 else -1.0
    return math.floor(room_s / per_load_s) - 1.0


def drain_s(
    cand: Candidate, limits: Limits, input_chars: int, health: HealthView, fits: int
) -> float:
    """Predicted seconds until one of `cand`'s endpoints has at most `fits` requests in
    flight: the excess over the endpoints' present service rate (Little's law: L requests in
    flight, each taking the pair's predicted latency W at that load, finish at L / W a
    second). Its assumptions: nothing new arrives meanwhile, and answers run to their cap."""
    if fits < 0:
        return math.inf
    pair, out = cand.pair, limits.output_tokens
    ttft0 = pair.ttft_base_s + pair.ttft_per_input_token_s * input_tokens(pair, input_chars)
    best = math.inf
    for endpoint in cand.endpoints:
        now = health.load.get(endpoint.id, 0.0)
        excess = now - fits
        if excess <= 0:
            return 0.0
        w = (
            ttft0
            + pair.ttft_per_load_s * now
            + out * (pair.tpot_base_s + pair.tpot_per_load_s * now)
        )
        best = min(best, excess * w / now)
    return best
