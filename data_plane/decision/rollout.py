"""Rollout knobs applied after the decision: shadow mode and the canary fraction.

PURE: the random draw is an argument. The adaptive decision is never lost: a rolled-out
decision keeps it in `adaptive`, so the proxy can count what the router would have done.
"""

from __future__ import annotations

from dataclasses import replace

from data_plane.decision.choose import effective_limits, predict
from data_plane.decision.compile import AUTO_ALIAS
from data_plane.domain import (
    Candidate,
    CompiledPair,
    CompiledTable,
    NoRoute,
    NoRouteReason,
    RouteDecision,
    RouteReason,
    RouteRequest,
)


def _allowed(table: CompiledTable, alias: str, pair: CompiledPair) -> bool:
    allowed = table.by_alias.get(alias) or table.by_alias[AUTO_ALIAS]
    return any(p.pair == pair.pair for p in allowed)


def _candidate(decision: RouteDecision, pair: CompiledPair) -> Candidate:
    """The decision's own candidate for `pair` when it has one (its endpoints are already in
    power-of-two order, breakers respected); else a fresh estimate with every endpoint in
    table order at idle load (rollout sees no health: the proxy's breaker check still skips
    ejected endpoints per attempt)."""
    for c in decision.candidates:
        if c.pair.pair == pair.pair:
            return c
    output_tokens = decision.candidates[0].output_tokens
    return predict(pair, pair.endpoints, decision.input_chars, output_tokens, {})


def _reroute(decision: RouteDecision, pair: CompiledPair, reason: RouteReason) -> RouteDecision:
    return replace(
        decision,
        candidates=(_candidate(decision, pair),),
        reason=reason,
        adaptive=decision,
    )


def apply_rollout(decision: RouteDecision, table: CompiledTable, draw: float) -> RouteDecision:
    """Apply the table policy's shadow and canary settings; `draw` is uniform in [0, 1).

    Returns one of:
    - shadow enabled: the only candidate is `shadow.default_pair`, reason SHADOW;
    - otherwise, when `draw >= canary_fraction`: the only candidate is the baseline pair of
      the adaptive choice's family, reason CANARY_BASELINE;
    - otherwise `decision` itself (then `adaptive` is None).
    In the first two cases `adaptive` holds the adaptive decision (count
    `adaptive.candidates[0].pair` as the shadow decision) and there is no fallback to other
    pairs: that traffic behaves as it would without the router. A target pair that the
    request's `model` does not allow (e.g. a pinned pair) or that is not in the table leaves
    the decision unchanged.
    """
    policy = table.policy
    if policy.shadow.enabled:
        target = next((p for p in table.pairs if p.pair == policy.shadow.default_pair), None)
        if target is not None and _allowed(table, decision.alias, target):
            return _reroute(decision, target, RouteReason.SHADOW)
        return decision
    if draw < policy.canary_fraction:
        return decision
    baseline = table.baselines.get(decision.candidates[0].pair.family)
    if baseline is not None and _allowed(table, decision.alias, baseline):
        return _reroute(decision, baseline, RouteReason.CANARY_BASELINE)
    return decision


def shadow_without_route(
    result: NoRoute, table: CompiledTable, req: RouteRequest
) -> RouteDecision | None:
    """Shadow mode when the router would refuse the request (budget infeasible in strict mode,
    every pair ejected): the default pair serves it as it would without the router, reason
    SHADOW, no adaptive decision. None when shadow mode is off, the model is unknown (the
    engine would not serve it either) or the `model` field excludes the default pair."""
    policy = table.policy
    if not policy.shadow.enabled or result.reason is NoRouteReason.UNKNOWN_MODEL:
        return None
    target = next((p for p in table.pairs if p.pair == policy.shadow.default_pair), None)
    alias = req.facts.alias
    if target is None or not _allowed(table, alias, target):
        return None
    limits = effective_limits(table, req)
    chars = req.facts.input_chars
    return RouteDecision(
        candidates=(predict(target, target.endpoints, chars, limits.output_tokens, {}),),
        reason=RouteReason.SHADOW,
        category=limits.category,
        complexity=req.facts.complexity,
        budget_latency_s=limits.latency_s,
        budget_ttft_s=limits.ttft_s,
        min_accuracy=limits.min_accuracy,
        alias=alias,
        input_chars=chars,
        max_cost_usd=limits.max_cost_usd,
        mode=limits.mode,
        doubt_floors=limits.doubt_floors,
    )
