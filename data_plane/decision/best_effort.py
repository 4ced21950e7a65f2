"""Best effort when nothing is proven: the pair most likely to meet the whole request.

PURE. When no pair meets the floor and the budget with the table's guarantee, best-effort
mode ranks the healthy pairs that fit context and cost by the chance that they meet both
(`chance.slo_chance`: P(true accuracy >= floor) x P(latency within the budget)), and says in
its reason which part the served pair leaves unproven: the latency
(`best_effort_latency_relaxed`), the floor (`best_effort_below_floor`) or both
(`best_effort_unproven`). Ties, which mostly mean chances of exactly 0 (a table without
latency spreads, accuracies unknown), go to a pair whose floor is proven, then the bound
closest to the floor and the more precise format (the evidence: docs/accuracy.md, "Best
effort: the chance of meeting the request"), then the prediction closest to the budget,
then the cheaper.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from data_plane.decision.chance import slo_chance
from data_plane.decision.feasibility import Limits, floors_of, latency_violation
from data_plane.domain import Candidate, CompiledPair, RouteReason

# A candidate for best effort, and whether the table proves the floor for it.
Option = tuple[Candidate, bool]


def floor_margin(pair: CompiledPair, floors: Sequence[tuple[str, float]]) -> float:
    """How far the pair's bound clears the request's floors (negative: below), in the
    category where it clears least. The bound, not the point estimate: it carries the
    evidence (the items behind the number, the family cap; docs/accuracy.md)."""
    return min(pair.accuracy_bound.get(category, 0.0) - floor for category, floor in floors)


def _overshoot(c: Candidate, limits: Limits) -> float:
    """How far the prediction runs past the tighter budget, as a ratio (0 within it)."""
    ratios = [0.0]
    if limits.latency_s is not None and limits.latency_s > 0.0:
        ratios.append(c.predicted_latency_s / limits.latency_s - 1.0)
    if limits.ttft_s is not None and limits.ttft_s > 0.0:
        ratios.append(c.predicted_ttft_s / limits.ttft_s - 1.0)
    return max(ratios)


def _key(
    c: Candidate, limits: Limits, floors: Sequence[tuple[str, float]]
) -> tuple[bool, float, bool, float, int, float, float, float, int]:
    chance = c.chance
    assert chance is not None
    budgeted = limits.latency_s is not None or limits.ttft_s is not None
    unproven_floor = not chance.floor_proven
    return (
        # beyond its profiled load a pair's latency is an extrapolation: last
        budgeted and c.load > c.pair.max_profiled_load,
        -chance.p_meet,
        # ties (mostly chances of exactly 0): the proven floor, the bound closest to the
        # floor, the more precise format (evidence, while the floor is unproven), the
        # prediction closest to the budget, the likelier accuracy, the cheaper
        unproven_floor,
        max(0.0, -floor_margin(c.pair, floors)),
        c.pair.ladder_rank if unproven_floor else 0,
        _overshoot(c, limits),
        -chance.p_accuracy,
        c.estimated_cost_usd,
        c.pair.order,
    )


def rank_best_effort(
    options: Sequence[Option], limits: Limits
) -> tuple[RouteReason, tuple[Candidate, ...]]:
    """The best-effort chain over `options` (non-empty), most likely to meet the request
    first, each candidate carrying its chance, and the reason naming what the first one
    leaves unproven."""
    floors = floors_of(limits)
    budgets = (limits.latency_s, limits.ttft_s)
    chained = [
        replace(
            c,
            chance=slo_chance(c, floors, budgets, (proven, latency_violation(c, limits) is None)),
        )
        for c, proven in options
    ]
    chained.sort(key=lambda c: _key(c, limits, floors))
    head = chained[0].chance
    assert head is not None
    return head.reason, tuple(chained)
