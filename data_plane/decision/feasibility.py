"""Feasibility of one pair for one request: effective limits, prediction, the rules in order.

PURE. The one place the routing assumptions live (see `first_violation`); `scan.py` scans
with the same arithmetic inlined, and `rejections.py` explains with the functions here.
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping
from typing import NamedTuple

from data_plane.domain import (
    BudgetMode,
    Candidate,
    CategoryDoubt,
    CompiledEndpoint,
    CompiledPair,
    CompiledTable,
    Rejected,
    Rejection,
    RouteRequest,
    load_terms,
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
RANK = {rule: i for i, rule in enumerate(RULE_ORDER)}


class Limits(NamedTuple):
    """The effective budget of one request: headers first, then the category's policy default."""

    category: str
    output_tokens: int
    latency_s: float | None
    ttft_s: float | None
    min_accuracy: float
    max_cost_usd: float | None
    mode: BudgetMode
    # Under doubt (docs/classifier.md): the other plausible categories' (category, floor),
    # each checked in its own accuracy column; empty when the category is known.
    doubt_floors: tuple[tuple[str, float], ...] = ()


def _table_category(table: CompiledTable, category: str) -> str:
    """`category`, or the table's default category when the table does not know it."""
    return category if category in table.categories else table.default_category


def doubt_floors(
    table: CompiledTable, doubt: CategoryDoubt | None, routed: str, header: float | None
) -> tuple[tuple[str, float], ...]:
    """The floors an abstaining request must also meet: every plausible category other than
    the one it is routed under (one the table does not know counts as the default category),
    at `header` (X-Min-Accuracy) when given, else at that category's policy floor. None when
    the classifier was sure, or when the policy names a `doubt_category` (the operator's
    documented choice: that category's floor in its column, alone)."""
    if doubt is None or table.policy.doubt_category is not None:
        return ()
    found: list[tuple[str, float]] = []
    for name in doubt.plausible:
        category = _table_category(table, name)
        floor = header if header is not None else table.categories[category].min_accuracy
        if category != routed and (category, floor) not in found:
            found.append((category, floor))
    return tuple(found)


def effective_limits(table: CompiledTable, req: RouteRequest) -> Limits:
    """Resolve the category (header override, else classifier; unknown -> table default), and
    under doubt the other plausible categories' floors (`doubt_floors`)."""
    budget = req.budget
    category = _table_category(table, budget.category or req.facts.category)
    defaults = table.categories[category]
    max_out = req.facts.max_output_tokens
    return Limits(
        category,
        max_out if max_out is not None else defaults.typical_output_tokens,
        budget.latency_s if budget.latency_s is not None else defaults.latency_budget_s,
        budget.ttft_s if budget.ttft_s is not None else defaults.ttft_budget_s,
        budget.min_accuracy if budget.min_accuracy is not None else defaults.min_accuracy,
        budget.max_cost_usd,
        budget.mode or table.default_mode,
        doubt_floors(table, req.facts.doubt, category, budget.min_accuracy),
    )


def floor_column(table: CompiledTable, limits: Limits) -> tuple[float, ...]:
    """Per pair (table order), the number the scan compares with `limits.min_accuracy`: the
    bound in the request's category, or -1 (below any floor) for a pair that misses one of
    the doubt floors in that category's own column. Without doubt, the table's own tuple."""
    column = table.accuracy_by_category[limits.category]
    if not limits.doubt_floors:
        return column
    others = [(table.accuracy_by_category[c], floor) for c, floor in limits.doubt_floors]
    return tuple(
        a if all(col[i] >= floor for col, floor in others) else -1.0 for i, a in enumerate(column)
    )


def floors_of(limits: Limits) -> tuple[tuple[str, float], ...]:
    """Every (category, floor) the request must meet: its own first, then the doubt floors."""
    return ((limits.category, limits.min_accuracy), *limits.doubt_floors)


def order_endpoints(
    live: tuple[CompiledEndpoint, ...], load: Mapping[str, float], rng: random.Random
) -> tuple[CompiledEndpoint, ...]:
    """Power of two choices: of two random live endpoints the less loaded goes first (ties:
    the random draw decides), then every other live endpoint by load (table order on ties).

    One endpoint uses no randomness; two use a draw only on a tie (both are always the two
    chosen, so only a tie is left to chance)."""
    n = len(live)
    if n == 1:
        return live
    if n == 2:
        a, b = live
        load_a, load_b = load.get(a.id, 0.0), load.get(b.id, 0.0)
        if load_a < load_b or (load_a == load_b and rng.random() < 0.5):
            return live
        return (b, a)
    i = int(rng.random() * n)
    j = int(rng.random() * (n - 1))
    j += j >= i
    a, b = live[i], live[j]
    first = a if load.get(a.id, 0.0) <= load.get(b.id, 0.0) else b
    rest = sorted((e for e in live if e is not first), key=lambda e: load.get(e.id, 0.0))
    return (first, *rest)


def input_tokens(pair: CompiledPair, input_chars: int) -> int:
    """Prompt tokens on `pair`'s family: characters over its measured characters per token."""
    return math.ceil(input_chars / pair.chars_per_token)


def predict(
    pair: CompiledPair,
    endpoints: tuple[CompiledEndpoint, ...],
    input_chars: int,
    output_tokens: int,
    load: Mapping[str, float],
) -> Candidate:
    """Tokens, latency and cost of serving this request on `pair` via `endpoints[0]`."""
    tokens = input_tokens(pair, input_chars)
    at_load = load.get(endpoints[0].id, 0.0) + 1.0
    ttft_load_s, tpot_load_s = load_terms(pair, at_load, tokens)
    ttft_s = pair.ttft_base_s + pair.ttft_per_input_token_s * tokens + ttft_load_s
    tpot_s = pair.tpot_base_s + tpot_load_s
    return Candidate(
        pair=pair,
        endpoints=endpoints,
        input_tokens=tokens,
        output_tokens=output_tokens,
        predicted_ttft_s=ttft_s,
        predicted_latency_s=ttft_s + output_tokens * tpot_s,
        estimated_cost_usd=(
            tokens * pair.input_usd_per_token + output_tokens * pair.output_usd_per_token
        ),
        load=at_load,
    )


def _floor(value: float) -> str:
    """0.8 -> '0.80', 0.855 -> '0.855': two decimals unless the floor has a third."""
    return f"{value:.2f}" if abs(value * 100 - round(value * 100)) < 1e-9 else f"{value:.3f}"


def _usd(value: float) -> str:
    return f"${value:.3g}"


def static_violation(
    pair: CompiledPair, tokens: tuple[int, int], limits: Limits, *, relax_floor: bool = False
) -> Rejected | None:
    """Rules 2-3, which no load changes: context length for (input, output) tokens, then the
    accuracy floor."""
    needed = tokens[0] + tokens[1]
    if needed > pair.context_length:
        return Rejected(
            pair.pair,
            Rejection.CONTEXT_TOO_LONG,
            f"needs {tokens[0]} input + {tokens[1]} output = {needed} tokens "
            f"> context {pair.context_length}",
        )
    if relax_floor:
        return None
    for category, floor in floors_of(limits):
        accuracy = pair.accuracy_bound.get(category, 0.0)
        if accuracy < floor:
            return _below_floor(pair, category, floor, category != limits.category)
    return None


def _below_floor(pair: CompiledPair, category: str, floor: float, doubt: bool) -> Rejected:
    basis = pair.floor_basis.get(category)
    accuracy = pair.accuracy_bound.get(category, 0.0)
    detail = (
        f"accuracy {accuracy:.3f} on {category} < floor {floor:.3f}"
        if basis is None
        else f"below floor {_floor(floor)} {basis}"
    )
    if doubt:
        detail += f" ({category} is plausible: the classifier was unsure)"
    return Rejected(pair.pair, Rejection.BELOW_FLOOR, detail)


def first_violation(
    c: Candidate, limits: Limits, *, relax_latency: bool = False, relax_floor: bool = False
) -> Rejected | None:
    """Rules 2-5 for one pair whose endpoints are not all ejected (rule 1 is checked by the
    caller); None when feasible. The one place the feasibility assumptions live:

    - input tokens = ceil(prompt chars / the family's measured chars per token); output tokens
      = max_tokens when given, else the category's typical length: we assume the answer runs
      to its cap, a safe bound for both latency and context;
    - latency is the table's linear model at its quantile (p95 by default), its intercepts
      widened by the fit's error (`compile.widened_intercepts`):
      TTFT(input tokens, load) + output tokens x TPOT(load), where load = outstanding requests
      at the endpoint that would be used + 1 (this request);
    - beyond the highest load the profile measured the model is not extrapolated: a pair
      under a latency or TTFT budget is then too slow, whatever the line says;
    - cost = input tokens x input price + output tokens x output price;
    - the floor is compared with the table's accuracy bound (docs/accuracy.md): the one-sided
      lower bound at the policy's floor_confidence, 0 below min_eval_items; a category the
      pair was never measured on counts as accuracy 0; under doubt every plausible
      category's floor is checked in its own column (`doubt_floors`).
    Best-effort relaxation drops the latency rule, then the floor; never context or cost.
    """
    tokens = (c.input_tokens, c.output_tokens)
    static = static_violation(c.pair, tokens, limits, relax_floor=relax_floor)
    if static is not None:
        return static
    if not relax_latency:
        slow = latency_violation(c, limits)
        if slow is not None:
            return slow
    return cost_violation(c.pair, c.estimated_cost_usd, limits)


def cost_violation(pair: CompiledPair, cost_usd: float, limits: Limits) -> Rejected | None:
    """Rule 5, which no load changes either: the estimated cost against the ceiling."""
    if limits.max_cost_usd is not None and cost_usd > limits.max_cost_usd:
        return Rejected(
            pair.pair,
            Rejection.TOO_EXPENSIVE,
            f"estimated {_usd(cost_usd)} > ceiling {_usd(limits.max_cost_usd)}",
        )
    return None


def latency_violation(c: Candidate, limits: Limits) -> Rejected | None:
    """Rule 4 for a predicted candidate: beyond the profiled load, or too slow for the
    latency or the TTFT budget; None when the prediction fits (or no budget is set)."""
    top = c.pair.max_profiled_load
    if (limits.latency_s is not None or limits.ttft_s is not None) and c.load > top:
        return Rejected(
            c.pair.pair,
            Rejection.TOO_SLOW,
            f"load {c.load:g} is beyond the highest profiled load {top:g}: no prediction",
        )
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
