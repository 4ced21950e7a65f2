"""Admission on observed saturation: refuse a sheddable request only while every pair that
meets it unloaded is full (docs/data_plane.md, "Flow control").

PURE, beside `choose_route` and called after it with the request's fleet
(`saturation.fleet_of`). A request is served as decided unless all of these hold:

- its priority class is sheddable (a class that is not, critical by default, is never shed);
- some pair meets it unloaded (a request no pair meets even at a load of 1 keeps today's
  handling: best effort, or a 400 naming the binding rule);
- no pair of its fleet has room: on each, every live endpoint already holds the requests it
  may fill there (`saturation`: the sustainable concurrency, or the class's line while the
  fleet is pressed; at least 1), counting only what is in flight.

Then it is refused with the predicted drain time as Retry-After (in the HTTP door it first
waits in the replica's queue while its budget allows, `flow.queue`). While some pair has
room, the decision's candidates with room go first (while the fleet is pressed, a pair
within the class's line is preferred to a cheaper one past it); the decision itself is
unchanged when its first candidate has room, the common case.

Retry-After is the predicted drain time: for the pair's endpoints, how long until enough of
the requests in flight finish for this one to fit (`drain_s`). What else could explain a
refusal: the load figures include queued work scraped from engines and other replicas'
counts, so a stale scrape or share can over- or under-state the load for up to their
intervals.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from itertools import islice

from contracts.policy import PriorityClass
from data_plane.decision.capacity import predicted_at
from data_plane.decision.feasibility import Limits
from data_plane.decision.saturation import Fleet
from data_plane.domain import (
    Candidate,
    CompiledTable,
    HealthView,
    NoRoute,
    NoRouteReason,
    RouteDecision,
    RouteRequest,
)

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
    docstring). `fleet`: the request's fleet for its class, None when no pair meets it
    unloaded."""
    name, klass = priority
    if not klass.sheddable or fleet is None:
        return result
    if isinstance(result, NoRoute) and result.reason is not NoRouteReason.BUDGET_INFEASIBLE:
        return result
    room = fleet.with_room()
    if room:
        return _room_first(result, room) if isinstance(result, RouteDecision) else result
    chars = req.facts.input_chars
    wait_s = min(
        drain_s(p.candidate, p.limits, chars, health, p.limit(fleet.pressed) - 1.0)
        for p in islice(fleet.pairs, _DRAIN_CANDIDATES)
    )
    return Shed(
        wait_s,
        f"every pair that meets this request's budget is full ({len(fleet.pairs)} "
        f"pairs, requests in flight at priority class {name!r}'s line); the class is "
        "sheddable",
    )


def _room_first(decision: RouteDecision, room: frozenset[str]) -> RouteDecision:
    """The decision with its candidates that have room first (unchanged when the first
    has, or when none has: a best-effort decision on pairs outside the fleet)."""
    if decision.candidates[0].pair.pair in room:
        return decision
    within = [c for c in decision.candidates if c.pair.pair in room]
    if not within:
        return decision
    rest = [c for c in decision.candidates if c.pair.pair not in room]
    return replace(decision, candidates=(*within, *rest))


def drain_s(
    cand: Candidate, limits: Limits, input_chars: int, health: HealthView, fits: float
) -> float:
    """Predicted seconds until one of `cand`'s endpoints has at most `fits` requests in
    flight: the excess over the endpoints' present service rate (Little's law: L requests in
    flight, each taking the pair's predicted latency W at that load, finish at L / W a
    second). Its assumptions: nothing new arrives meanwhile, and answers run to the predicted
    output length of `limits` (the pair's, `saturation.PairRoom.limits`)."""
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
