"""The quality-first objective: the most precise feasible pair, stepping down under load.

PURE. Same feasibility as the cost objective (one full scan, `scan.scan`); the choice is the
feasible pair on the highest rung of the precision ladder (`ladder.ladder_rank`: FP16 before
FP8 before INT8 before INT4), ties broken by cost, predicted latency, table order. As load
grows the precise pairs' predictions stop fitting the budget and traffic steps down; floors
are never relaxed for it. Hysteresis: a pair that load pushed off (for a category) comes back
only when its prediction fits (1 - `policy.ladder_hysteresis_ratio`) x the budget, so a load
hovering at the threshold does not flip decisions on every scrape. The state arrives in
`HealthView.ladder` and the next state leaves in `RouteDecision.ladder`.
"""

from __future__ import annotations

import random
from dataclasses import replace

from data_plane.decision.chain import CandidateChain, FeasibleRow, RejectionList
from data_plane.decision.fallback import decide_without_feasible
from data_plane.decision.feasibility import Limits, floor_column
from data_plane.decision.ladder import LadderState, next_state
from data_plane.decision.rejections import all_rejections, not_allowed
from data_plane.decision.scan import scan
from data_plane.domain import (
    CompiledTable,
    HealthView,
    NoRoute,
    RouteDecision,
    RouteReason,
    RouteRequest,
    ScanRow,
)


def _ladder_order(found: FeasibleRow) -> tuple[int, float, float, int]:
    return (found[3].ladder_rank, found[0], found[1], found[2])


def _too_slow(found: FeasibleRow, limits: Limits, margin: float) -> bool:
    """Does the prediction miss the budget scaled by `margin` (1 = the budget itself)?
    Beyond the profiled load a budgeted prediction always misses (`first_violation`)."""
    latency_s, ttft_s = limits.latency_s, limits.ttft_s
    if latency_s is None and ttft_s is None:
        return False
    if found[7] > found[3].max_profiled_load:
        return True
    return (latency_s is not None and found[1] > latency_s * margin) or (
        ttft_s is not None and found[6] > ttft_s * margin
    )


def choose_most_precise(
    table: CompiledTable,
    req: RouteRequest,
    limits: Limits,
    rows: tuple[ScanRow, ...],
    health: HealthView,
    rng: random.Random,
) -> RouteDecision | NoRoute:
    """The quality-first decision (see the module docstring); without a feasible pair, the
    cost objective's best-effort or strict answer (`fallback`)."""
    alias, chars = req.facts.alias, req.facts.input_chars
    accuracy = floor_column(table, limits)
    _, feasible, missed = scan(rows, None, accuracy, limits, chars, health, rng)
    category, state = limits.category, health.ladder
    pushed_off = [m[3].pair for m in missed if _too_slow(m, limits, 1.0)]
    if not feasible:
        excluded = not_allowed(table, table.by_alias[alias], alias)
        relaxed = decide_without_feasible(req, limits, rows, missed, health, rng, excluded)
        if isinstance(relaxed, NoRoute):
            return relaxed
        return _with_ladder(relaxed, next_state(state, category, (), pushed_off))
    margin = 1.0 - table.policy.ladder_hysteresis_ratio
    fitted: list[FeasibleRow] = []
    held: list[FeasibleRow] = []  # feasible, but pushed off and not yet back under the margin
    for f in feasible:
        pushed = (f[3].pair, category) in state and _too_slow(f, limits, margin)
        (held if pushed else fitted).append(f)
    # Held pairs still meet the budget: they serve when nothing else does, and as fallbacks.
    chain = sorted(fitted, key=_ladder_order) + sorted(held, key=_ladder_order)
    ejected = health.open_endpoints
    scanned = (feasible, missed)
    return RouteDecision(
        candidates=CandidateChain(chain, limits.output_tokens),
        reason=RouteReason.MOST_PRECISE_FEASIBLE,
        category=category,
        complexity=req.facts.complexity,
        budget_latency_s=limits.latency_s,
        budget_ttft_s=limits.ttft_s,
        min_accuracy=limits.min_accuracy,
        rejected=RejectionList(
            lambda: all_rejections(table, alias, limits, chars, ejected, scanned)
        ),
        alias=alias,
        input_chars=chars,
        max_cost_usd=limits.max_cost_usd,
        mode=limits.mode,
        doubt_floors=limits.doubt_floors,
        ladder=next_state(state, category, (f[3].pair for f in fitted), pushed_off),
    )


def _with_ladder(decision: RouteDecision, state: LadderState) -> RouteDecision:
    """A best-effort decision that also carries the ladder's next state."""
    return replace(decision, ladder=state)
