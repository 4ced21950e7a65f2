"""The routing decision: (compiled table, request, health snapshot, rng) -> RouteDecision | NoRoute.

PURE and fast. `scan.scan` walks the alias's pre-flattened rows in the table's cost order and
stops once no later row can undercut the cheapest feasible pair, which is the choice; the
rest of the fallback chain and the rejections come back as lazy sequences
(`data_plane.decision.chain`) worked out from decision-time figures when first read. Reads no clock,
env, network or logger; randomness (power-of-two choices) comes only from the `rng`
argument, so the same inputs and rng state give the same decision. When no pair is feasible,
`fallback` decides. Semantics: docs/design.md, "Routing semantics"; assumptions:
`feasibility.first_violation`.
"""

from __future__ import annotations

import random

from data_plane.decision.chain import CandidateChain, RejectionList
from data_plane.decision.fallback import decide_without_feasible
from data_plane.decision.feasibility import (
    RULE_ORDER,
    Limits,
    effective_limits,
    first_violation,
    floor_column,
    order_endpoints,
    predict,
)
from data_plane.decision.quality_first import choose_most_precise
from data_plane.decision.rejections import all_rejections, not_allowed
from data_plane.decision.scan import Rest, scan
from data_plane.domain import (
    CompiledTable,
    HealthView,
    NoRoute,
    NoRouteReason,
    Rejected,
    RouteDecision,
    RouteReason,
    RouteRequest,
)

__all__ = [
    "RULE_ORDER",
    "Limits",
    "choose_route",
    "effective_limits",
    "first_violation",
    "order_endpoints",
    "predict",
]


class _Explained:
    """The lazy half of one decision the chain does not read: the rejections."""

    __slots__ = ("_alias", "_limits", "_rest", "_table")

    def __init__(self, table: CompiledTable, alias: str, limits: Limits, rest: Rest) -> None:
        self._table, self._alias, self._limits, self._rest = table, alias, limits, rest

    def rejections(self, input_chars: int, ejected: frozenset[str]) -> tuple[Rejected, ...]:
        t, alias = self._table, self._alias
        return all_rejections(t, alias, self._limits, input_chars, ejected, self._rest.complete())


def choose_route(
    table: CompiledTable,
    req: RouteRequest,
    health: HealthView,
    rng: random.Random,
    limits: Limits | None = None,
) -> RouteDecision | NoRoute:
    """Feasible candidates, cheapest estimated cost first (ties: lower predicted latency, then
    table order), or under the policy's `quality-first` objective most precise first
    (`quality_first`); the sequence is the fallback chain. See `first_violation` for the
    assumptions and `fallback` for best-effort. `limits` are the request's effective limits
    when a caller taking a decision again has them (`relaxed`), else `effective_limits`'.
    Never raises for a valid table and request."""
    facts = req.facts
    alias = facts.alias
    rows = table.scan_rows.get(alias)
    if rows is None:
        return NoRoute(
            NoRouteReason.UNKNOWN_MODEL,
            f"model {alias!r} is not served; use 'auto', a family or a family@quantization pair",
        )
    if limits is None:
        limits = effective_limits(table, req)
    if table.policy.objective == "quality-first":
        return choose_most_precise(table, req, limits, rows, health, rng)
    chars = facts.input_chars
    accuracy = floor_column(table, limits)
    floors = table.cost_floors[alias]
    scanned = scan(rows, floors, accuracy, limits, chars, health, rng)
    _, feasible, missed = scanned
    if not feasible:
        excluded = not_allowed(table, table.by_alias[alias], alias)
        return decide_without_feasible(req, limits, rows, missed, health, rng, excluded)
    rest = Rest(rows, floors, accuracy, limits, chars, scanned, health, rng)
    lazy = _Explained(table, alias, limits, rest)
    ejected = health.open_endpoints
    return RouteDecision(
        candidates=CandidateChain([min(feasible)], limits.output_tokens, rest.leading),
        reason=RouteReason.CHEAPEST_FEASIBLE,
        category=limits.category,
        complexity=facts.complexity,
        budget_latency_s=limits.latency_s,
        budget_ttft_s=limits.ttft_s,
        min_accuracy=limits.min_accuracy,
        rejected=RejectionList(lambda: lazy.rejections(chars, ejected)),
        alias=alias,
        input_chars=chars,
        max_cost_usd=limits.max_cost_usd,
        mode=limits.mode,
        doubt_floors=limits.doubt_floors,
    )
