"""The routing decision: (compiled table, request, health snapshot, rng) -> RouteDecision | NoRoute.

PURE and fast: a linear scan over the pairs the `model` field allows. Reads no clock, env,
network or logger; randomness (power-of-two-choices) comes only from the `rng` argument, so the
same inputs and rng state give the same decision. Semantics: DESIGN.md "Routing semantics".
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping
from dataclasses import dataclass

from data_plane.domain import (
    BudgetMode,
    Candidate,
    CompiledEndpoint,
    CompiledPair,
    CompiledTable,
    HealthView,
    NoRoute,
    NoRouteReason,
    Rejected,
    Rejection,
    RouteDecision,
    RouteReason,
    RouteRequest,
)

# Feasibility rules in the order they are checked; a pair records the first one it fails.
RULE_ORDER: tuple[Rejection, ...] = (
    Rejection.NOT_ALLOWED,
    Rejection.BREAKER_OPEN,
    Rejection.CONTEXT_TOO_LONG,
    Rejection.BELOW_FLOOR,
    Rejection.TOO_SLOW,
    Rejection.TOO_EXPENSIVE,
)
_RANK = {rule: i for i, rule in enumerate(RULE_ORDER)}


@dataclass(frozen=True, slots=True)
class Limits:
    """The effective budget of one request: headers first, then the category's policy default."""

    category: str
    output_tokens: int
    latency_s: float | None
    ttft_s: float | None
    min_accuracy: float
    max_cost_usd: float | None
    mode: BudgetMode


def effective_limits(table: CompiledTable, req: RouteRequest) -> Limits:
    """Resolve the category (header override, else classifier; unknown -> table default)."""
    budget = req.budget
    category = budget.category or req.facts.category
    if category not in table.categories:
        category = table.default_category
    defaults = table.categories[category]
    max_out = req.facts.max_output_tokens
    return Limits(
        category=category,
        output_tokens=max_out if max_out is not None else defaults.typical_output_tokens,
        latency_s=budget.latency_s if budget.latency_s is not None else defaults.latency_budget_s,
        ttft_s=budget.ttft_s if budget.ttft_s is not None else defaults.ttft_budget_s,
        min_accuracy=(
            budget.min_accuracy if budget.min_accuracy is not None else defaults.min_accuracy
        ),
        max_cost_usd=budget.max_cost_usd,
        mode=budget.mode or table.default_mode,
    )


def order_endpoints(
    live: tuple[CompiledEndpoint, ...], load: Mapping[str, float], rng: random.Random
) -> tuple[CompiledEndpoint, ...]:
    """Power of two choices: of two random live endpoints the less loaded goes first (ties:
    the random draw decides), then every other live endpoint by load (table order on ties)."""
    n = len(live)
    if n == 1:
        return live
    i = int(rng.random() * n)
    j = int(rng.random() * (n - 1))
    j += j >= i
    a, b = live[i], live[j]
    first = a if load.get(a.id, 0.0) <= load.get(b.id, 0.0) else b
    rest = sorted((e for e in live if e is not first), key=lambda e: load.get(e.id, 0.0))
    return (first, *rest)


def predict(
    pair: CompiledPair,
    endpoints: tuple[CompiledEndpoint, ...],
    input_chars: int,
    output_tokens: int,
    load: Mapping[str, float],
) -> Candidate:
    """Tokens, latency and cost of serving this request on `pair` via `endpoints[0]`."""
    input_tokens = math.ceil(input_chars / pair.chars_per_token)
    at_load = load.get(endpoints[0].id, 0.0) + 1.0
    ttft_s = pair.ttft_base_s + pair.ttft_per_input_token_s * input_tokens
    ttft_s += pair.ttft_per_load_s * at_load
    tpot_s = pair.tpot_base_s + pair.tpot_per_load_s * at_load
    return Candidate(
        pair=pair,
        endpoints=endpoints,
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        predicted_ttft_s=ttft_s,
        predicted_latency_s=ttft_s + output_tokens * tpot_s,
        estimated_cost_usd=(
            input_tokens * pair.input_usd_per_token + output_tokens * pair.output_usd_per_token
        ),
        load=at_load,
    )


def _usd(value: float) -> str:
    return f"${value:.3g}"


def first_violation(
    c: Candidate, limits: Limits, *, relax_latency: bool = False, relax_floor: bool = False
) -> Rejected | None:
    """Rules 2-5 for one pair whose endpoints are not all ejected (rule 1 is checked by the
    caller); None when feasible. The one place the feasibility assumptions live:

    - input tokens = ceil(prompt chars / the family's measured chars per token); output tokens
      = max_tokens when given, else the category's typical length: we assume the answer runs
      to its cap, a safe bound for both latency and context;
    - latency is the table's linear model at its quantile (p95 by default):
      TTFT(input tokens, load) + output tokens x TPOT(load), where load = outstanding requests
      at the endpoint that would be used + 1 (this request);
    - cost = input tokens x input price + output tokens x output price;
    - a category the pair was never measured on counts as accuracy 0.
    Best-effort relaxation drops the latency rule, then the floor; never context or cost.
    """
    pair = c.pair
    needed = c.input_tokens + c.output_tokens
    if needed > pair.context_length:
        return Rejected(
            pair.pair,
            Rejection.CONTEXT_TOO_LONG,
            f"needs {c.input_tokens} input + {c.output_tokens} output = {needed} tokens "
            f"> context {pair.context_length}",
        )
    accuracy = pair.accuracy.get(limits.category, 0.0)
    if not relax_floor and accuracy < limits.min_accuracy:
        return Rejected(
            pair.pair,
            Rejection.BELOW_FLOOR,
            f"accuracy {accuracy:.3f} on {limits.category} < floor {limits.min_accuracy:.3f}",
        )
    if not relax_latency:
        slow = _too_slow(c, limits)
        if slow is not None:
            return slow
    if limits.max_cost_usd is not None and c.estimated_cost_usd > limits.max_cost_usd:
        return Rejected(
            pair.pair,
            Rejection.TOO_EXPENSIVE,
            f"estimated {_usd(c.estimated_cost_usd)} > ceiling {_usd(limits.max_cost_usd)}",
        )
    return None


def _too_slow(c: Candidate, limits: Limits) -> Rejected | None:
    if limits.latency_s is not None and c.predicted_latency_s > limits.latency_s:
        return Rejected(
            c.pair.pair,
            Rejection.TOO_SLOW,
            f"predicted {c.predicted_latency_s:.2f} s > budget {limits.latency_s:.2f} s "
            f"at load {c.load:g}",
        )
    if limits.ttft_s is not None and c.predicted_ttft_s > limits.ttft_s:
        return Rejected(
            c.pair.pair,
            Rejection.TOO_SLOW,
            f"predicted TTFT {c.predicted_ttft_s:.2f} s > TTFT budget {limits.ttft_s:.2f} s "
            f"at load {c.load:g}",
        )
    return None


def _by_cost(c: Candidate) -> tuple[float, float, int]:
    return (c.estimated_cost_usd, c.predicted_latency_s, c.pair.order)


def _by_latency(c: Candidate) -> tuple[float, float, int]:
    return (c.predicted_latency_s, c.estimated_cost_usd, c.pair.order)


@dataclass(slots=True)
class _Scan:
    """Per-request scratch: every healthy pair's prediction, split by feasibility."""

    feasible: list[Candidate]
    infeasible: list[Candidate]
    rejected: list[Rejected]


def _scan(
    allowed: tuple[CompiledPair, ...],
    input_chars: int,
    limits: Limits,
    health: HealthView,
    rng: random.Random,
) -> _Scan:
    scan = _Scan([], [], [])
    ejected = health.open_endpoints
    for pair in allowed:
        live = tuple(e for e in pair.endpoints if e.id not in ejected)
        if not live:
            scan.rejected.append(
                Rejected(
                    pair.pair,
                    Rejection.BREAKER_OPEN,
                    f"all {len(pair.endpoints)} endpoint(s) ejected by their breakers",
                )
            )
            continue
        c = predict(
            pair,
            order_endpoints(live, health.load, rng),
            input_chars,
            limits.output_tokens,
            health.load,
        )
        violation = first_violation(c, limits)
        if violation is None:
            scan.feasible.append(c)
        else:
            scan.infeasible.append(c)
            scan.rejected.append(violation)
    return scan


def _not_allowed(
    table: CompiledTable, allowed: tuple[CompiledPair, ...], alias: str
) -> list[Rejected]:
    if len(allowed) == len(table.pairs):
        return []
    names = {p.pair for p in allowed}
    return [
        Rejected(p.pair, Rejection.NOT_ALLOWED, f"not served under model {alias!r}")
        for p in table.pairs
        if p.pair not in names
    ]


def _relax(scan: _Scan, limits: Limits) -> tuple[RouteReason, list[Candidate]] | None:
    """Best-effort: keep the floor and relax latency; else the most accurate healthy pairs."""
    keep_floor = [
        c for c in scan.infeasible if first_violation(c, limits, relax_latency=True) is None
    ]
    if keep_floor:
        return RouteReason.LATENCY_RELAXED, sorted(keep_floor, key=_by_latency)
    any_floor = [
        c
        for c in scan.infeasible
        if first_violation(c, limits, relax_latency=True, relax_floor=True) is None
    ]
    if any_floor:
        category = limits.category

        def most_accurate(c: Candidate) -> tuple[float, float, float, int]:
            return (-c.pair.accuracy.get(category, 0.0), *_by_latency(c))

        return RouteReason.FLOOR_RELAXED, sorted(any_floor, key=most_accurate)
    return None


_BINDING_WORDS = {
    Rejection.CONTEXT_TOO_LONG: "the context length",
    Rejection.BELOW_FLOOR: "the accuracy floor",
    Rejection.TOO_SLOW: "the latency budget",
    Rejection.TOO_EXPENSIVE: "the cost ceiling",
}


def _infeasible(scan: _Scan, limits: Limits, rejected: tuple[Rejected, ...]) -> NoRoute:
    """Strict (or unrelaxable) failure naming the binding constraint: the rule that stopped
    the pairs that got furthest through the checks, with the cheapest such pair as example."""
    healthy = [r for r in scan.rejected if r.reason is not Rejection.BREAKER_OPEN]
    if limits.mode is BudgetMode.BEST_EFFORT:
        # Best-effort only fails when context or cost rule out every healthy pair.
        relaxed = (
            first_violation(c, limits, relax_latency=True, relax_floor=True)
            for c in scan.infeasible
        )
        healthy = [r for r in relaxed if r is not None]
    binding = max((r.reason for r in healthy), key=_RANK.__getitem__)
    example = next(r for r in healthy if r.reason is binding)
    count = sum(1 for r in healthy if r.reason is binding)
    detail = (
        f"no pair meets the budget ({limits.mode.value} mode, category {limits.category}); "
        f"binding constraint: {_BINDING_WORDS[binding]}, which rules out {count} pair(s), "
        f"e.g. {example.pair}: {example.detail}"
    )
    return NoRoute(NoRouteReason.BUDGET_INFEASIBLE, detail, binding=binding, rejected=rejected)


def choose_route(
    table: CompiledTable, req: RouteRequest, health: HealthView, rng: random.Random
) -> RouteDecision | NoRoute:
    """Feasible candidates, cheapest estimated cost first (ties: lower predicted latency, then
    table order); the tuple is the fallback chain. See `first_violation` for the assumptions
    and `_relax` for best-effort. Never raises for a valid table and request."""
    alias = req.facts.alias
    allowed = table.by_alias.get(alias)
    if allowed is None:
        return NoRoute(
            NoRouteReason.UNKNOWN_MODEL,
            f"model {alias!r} is not served; use 'auto', a family or a family@quantization pair",
        )
    limits = effective_limits(table, req)
    scan = _scan(allowed, req.facts.input_chars, limits, health, rng)
    rejected = tuple(scan.rejected + _not_allowed(table, allowed, alias))
    if not scan.feasible and not scan.infeasible:
        return NoRoute(
            NoRouteReason.ALL_UNHEALTHY,
            f"every endpoint of the {len(allowed)} pair(s) allowed by model {alias!r} "
            "is ejected by its breaker",
            rejected=rejected,
        )
    reason = RouteReason.CHEAPEST_FEASIBLE
    candidates = sorted(scan.feasible, key=_by_cost)
    if not candidates and limits.mode is BudgetMode.BEST_EFFORT:
        relaxed = _relax(scan, limits)
        if relaxed is not None:
            reason, candidates = relaxed
    if not candidates:
        return _infeasible(scan, limits, rejected)
    return RouteDecision(
        candidates=tuple(candidates),
        reason=reason,
        category=limits.category,
        complexity=req.facts.complexity,
        budget_latency_s=limits.latency_s,
        budget_ttft_s=limits.ttft_s,
        min_accuracy=limits.min_accuracy,
        rejected=rejected,
        alias=alias,
        input_chars=req.facts.input_chars,
        max_cost_usd=limits.max_cost_usd,
        mode=limits.mode,
    )
