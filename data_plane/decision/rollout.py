"""Rollout knobs applied after the decision: shadow mode and the canary fraction.

PURE: the random draw is an argument. The adaptive decision is never lost: a rolled-out
decision keeps it in `adaptive`, so the proxy can count what the router would have done.
"""

from __future__ import annotations

from dataclasses import replace

from data_plane.decision.choose import predict
from data_plane.decision.compile import AUTO_ALIAS
from data_plane.domain import Candidate, CompiledPair, CompiledTable, RouteDecision, RouteReason


def _allowed(table: CompiledTable, decision: RouteDecision, pair: CompiledPair) -> bool:
    allowed = table.by_alias.get(decision.alias) or table.by_alias[AUTO_ALIAS]
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
        if target is not None and _allowed(table, decision, target):
            return _reroute(decision, target, RouteReason.SHADOW)
        return decision
    if draw < policy.canary_fraction:
        return decision
    baseline = table.baselines.get(decision.candidates[0].pair.family)
    if baseline is not None and _allowed(table, decision, baseline):
        return _reroute(decision, baseline, RouteReason.CANARY_BASELINE)
    return decision
