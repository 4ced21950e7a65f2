"""The decision when the scan kept no pair: best-effort relaxation or a reasoned NoRoute.

PURE. Works from the scan's figures (`missed`: the pairs it predicted and found too slow or
too expensive) and the table; only pairs below the floor are predicted here, for best
effort's ranking by the chance of meeting the request (`best_effort`). Rejections are built eagerly:
a strict-mode error names the binding constraint in its message anyway.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence

from data_plane.decision.best_effort import Option, rank_best_effort
from data_plane.decision.chain import FeasibleRow, RejectionList, candidate_of
from data_plane.decision.feasibility import (
    RANK,
    Limits,
    cost_violation,
    first_violation,
    order_endpoints,
    predict,
    static_violation,
)
from data_plane.decision.rejections import RULE_WORDS, allowed_rejections
from data_plane.domain import (
    BudgetMode,
    Candidate,
    HealthView,
    NoRoute,
    NoRouteReason,
    Rejected,
    Rejection,
    RouteDecision,
    RouteReason,
    RouteRequest,
    ScanRow,
)

# Not a budget rule: these never count towards the binding constraint.
_NOT_RULED = frozenset({Rejection.BREAKER_OPEN, Rejection.NOT_ALLOWED})


def _within_cost(found: FeasibleRow, limits: Limits) -> bool:
    return limits.max_cost_usd is None or found[0] <= limits.max_cost_usd


def _below_floor(
    rows: list[ScanRow],
    missed: dict[int, FeasibleRow],
    limits: Limits,
    input_chars: int,
    health: HealthView,
    rng: random.Random,
) -> list[Candidate]:
    """Predictions for the live pairs the scan skipped for the floor alone (context and cost
    met): the candidates when best-effort mode relaxes the floor."""
    found = []
    for row in rows:
        pair = row.pair
        tokens = (math.ceil(input_chars / row.chars_per_token), limits.output_tokens)
        if row.order in missed or static_violation(pair, tokens, limits, relax_floor=True):
            continue
        cost = tokens[0] * row.input_usd_per_token + tokens[1] * row.output_usd_per_token
        if cost_violation(pair, cost, limits) is None:
            live = tuple(e for e in row.endpoints if e.id not in health.open_endpoints)
            ordered = order_endpoints(live, health.load, rng)
            found.append(predict(pair, ordered, input_chars, limits.output_tokens, health.load))
    return found


def _relax(
    live: list[ScanRow],
    missed: dict[int, FeasibleRow],
    limits: Limits,
    input_chars: int,
    health: HealthView,
    rng: random.Random,
) -> tuple[RouteReason, Sequence[Candidate]] | None:
    """Best-effort: the healthy pairs that fit context and cost (those the scan found too
    slow keep the floor; the others do not prove it), most likely to meet the whole request
    first (`best_effort.rank_best_effort`); None when there is none."""
    out = limits.output_tokens
    options: list[Option] = [
        (candidate_of(m, out), True) for m in missed.values() if _within_cost(m, limits)
    ]
    options += [(c, False) for c in _below_floor(live, missed, limits, input_chars, health, rng)]
    if not options:
        return None
    return rank_best_effort(options, limits)


def _unrelaxable(
    live: list[ScanRow], missed: dict[int, FeasibleRow], limits: Limits, input_chars: int
) -> list[Rejected]:
    """Best-effort failures: what rules out each live pair with latency and floor relaxed
    (context or cost, the rules best-effort never relaxes)."""
    found = []
    for row in live:
        m = missed.get(row.order)
        if m is not None:
            c = candidate_of(m, limits.output_tokens)
            v = first_violation(c, limits, relax_latency=True, relax_floor=True)
        else:
            tokens = (math.ceil(input_chars / row.chars_per_token), limits.output_tokens)
            v = static_violation(row.pair, tokens, limits, relax_floor=True)
            if v is None:
                cost = tokens[0] * row.input_usd_per_token + tokens[1] * row.output_usd_per_token
                v = cost_violation(row.pair, cost, limits)
        if v is not None:
            found.append(v)
    return found


def _too_long(rows: Sequence[ScanRow], healthy: list[Rejected], limits: Limits, chars: int) -> str:
    """The words of a request longer than every healthy pair's context, in the phrasing
    OpenAI uses (client libraries match "maximum context length")."""
    names = {r.pair for r in healthy}
    widest = max((r for r in rows if r.pair.pair in names), key=lambda r: r.context_length)
    tokens = math.ceil(chars / widest.chars_per_token)
    return (
        f"This model's maximum context length is {widest.context_length} tokens (the largest "
        f"of {len(names)} pair(s), {widest.pair.pair}); the request needs {tokens} input + "
        f"{limits.output_tokens} output = {tokens + limits.output_tokens} tokens. Shorten the "
        "prompt or lower max_tokens"
    )


def _ejected_fit(
    rows: Sequence[ScanRow], ejected: frozenset[str], limits: Limits, chars: int
) -> int:
    """How many breaker-ejected pairs the request would fit: then it is not too long, the
    pairs that could take it are down for now (a retry after the cooldown may succeed)."""
    return sum(
        1
        for row in rows
        if ejected.issuperset(row.endpoint_ids)
        and math.ceil(chars / row.chars_per_token) + limits.output_tokens <= row.context_length
    )


def _infeasible(
    healthy: list[Rejected],
    limits: Limits,
    rejected: tuple[Rejected, ...],
    scope: tuple[Sequence[ScanRow], int, frozenset[str]],
) -> NoRoute:
    """Strict (or unrelaxable) failure naming the binding constraint: the rule that stopped
    the pairs that got furthest through the checks, with the cheapest such pair as example.
    `scope` is (the allowed rows, the prompt's characters, the ejected endpoints), for a
    request longer than every healthy pair's context."""
    binding = max((r.reason for r in healthy), key=RANK.__getitem__)
    if binding is Rejection.CONTEXT_TOO_LONG:
        rows, chars, ejected = scope
        down = _ejected_fit(rows, ejected, limits, chars)
        if down:
            detail = (
                f"only {down} pair(s) whose context fits the request are allowed, and every "
                "endpoint of them is ejected by its breaker"
            )
            return NoRoute(NoRouteReason.ALL_UNHEALTHY, detail, rejected=rejected)
        detail = _too_long(rows, healthy, limits, chars)
    else:
        example = next(r for r in healthy if r.reason is binding)
        count = sum(1 for r in healthy if r.reason is binding)
        detail = (
            f"no pair meets the budget ({limits.mode.value} mode, category {limits.category}); "
            f"binding constraint: {RULE_WORDS[binding].binding}, which rules out {count} pair(s), "
            f"e.g. {example.pair}: {example.detail}"
        )
    return NoRoute(
        NoRouteReason.BUDGET_INFEASIBLE,
        detail,
        binding=binding,
        rejected=rejected,
        mode=limits.mode,
    )


def decide_without_feasible(
    req: RouteRequest,
    limits: Limits,
    rows: tuple[ScanRow, ...],
    missed: list[FeasibleRow],
    health: HealthView,
    rng: random.Random,
    not_served: list[Rejected],
) -> RouteDecision | NoRoute:
    """The decision for a request whose full scan kept no pair: ALL_UNHEALTHY, best-effort
    relaxation, or BUDGET_INFEASIBLE naming the binding rule. `not_served` are the pairs
    the `model` field excludes (the tail of every rejection list). A relaxed decision
    explains its rejections lazily, as a feasible one does: under overload most decisions
    take this path."""
    chars = req.facts.input_chars
    ejected = health.open_endpoints
    live = [row for row in rows if not ejected.issuperset(row.endpoint_ids)]

    def rejected() -> tuple[Rejected, ...]:
        return (*allowed_rejections(rows, limits, chars, ejected, ([], missed)), *not_served)

    if not live:
        return NoRoute(
            NoRouteReason.ALL_UNHEALTHY,
            f"every endpoint of the {len(rows)} pair(s) allowed by model {req.facts.alias!r} "
            "is ejected by its breaker",
            rejected=rejected(),
        )
    by_order = {m[2]: m for m in missed}
    if limits.mode is BudgetMode.STRICT:
        eager = rejected()
        healthy = [r for r in eager if r.reason not in _NOT_RULED]
        return _infeasible(healthy, limits, eager, (rows, chars, ejected))
    relaxed = _relax(live, by_order, limits, chars, health, rng)
    if relaxed is None:
        unrelaxable = _unrelaxable(live, by_order, limits, chars)
        return _infeasible(unrelaxable, limits, rejected(), (rows, chars, ejected))
    reason, candidates = relaxed
    return RouteDecision(
        candidates=candidates,
        reason=reason,
        category=limits.category,
        complexity=req.facts.complexity,
        budget_latency_s=limits.latency_s,
        budget_ttft_s=limits.ttft_s,
        min_accuracy=limits.min_accuracy,
        rejected=RejectionList(rejected),
        alias=req.facts.alias,
        input_chars=chars,
        max_cost_usd=limits.max_cost_usd,
        mode=limits.mode,
        doubt_floors=limits.doubt_floors,
    )
