"""Utility scores and dominance between pairs: the scoring half of the table build.

PURE: stdlib and contracts only; returns values, never logs.

Utility of pair p in category c (higher is better), with the policy's weights w and the
category's workload (n_in = policy.reference_input_tokens, n_out = the category's
typical_output_tokens) served at load 1:

    utility_c(p) = w.accuracy * accuracy_c(p)
                 - w.cost     * cost_c(p)    / max_q cost_c(q)
                 - w.latency  * latency_c(p) / max_q latency_c(q)

where q ranges over the table's entries, cost_c is the request's USD cost, latency_c the
predicted end-to-end seconds at the table's quantile, a category the pair never measured counts
as accuracy 0, and a ratio whose maximum is 0 counts as 0. Scores lie in
[-(w.cost + w.latency), w.accuracy] and compare pairs within one table only.

Dominance: b dominates a when they are of the same family (a request may pin a family), b has at
least a's context length, and for every request b is at least as cheap (input and output price),
as fast (TTFT of an empty prompt, TTFT per input token and TPOT at each whole load up to the
higher of their profiled loads, and the growth per load beyond, hence at every load) and as
accurate in every category (both the measured accuracy and the bound floors are compared with),
and strictly better in one of these. A dominated pair is never the cheapest
feasible choice at equal load, so the table drops it.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field

from contracts.policy import Policy
from contracts.routing_table import LatencyModel


@dataclass(frozen=True, slots=True)
class PairFigures:
    """What scoring needs to know about one pair; built once per table build."""

    pair: str
    family: str
    input_usd_per_mtok: float
    output_usd_per_mtok: float
    latency: LatencyModel
    accuracy: Mapping[str, float]
    context_length: int
    bound: Mapping[str, float] = field(default_factory=dict)  # what floors compare

    def cost_usd(self, input_tokens: int, output_tokens: int) -> float:
        total = input_tokens * self.input_usd_per_mtok + output_tokens * self.output_usd_per_mtok
        return total / 1_000_000

    def accuracy_in(self, category: str) -> float:
        """Accuracy in `category`; a category the pair never measured counts as 0."""
        return self.accuracy.get(category, 0.0)

    def mean_accuracy(self, categories: Sequence[str]) -> float:
        return sum(self.accuracy_in(c) for c in categories) / len(categories) if categories else 0.0


def category_workload(policy: Policy, category: str) -> tuple[int, int]:
    """(input tokens, output tokens) of the request that represents `category`."""
    return policy.reference_input_tokens, policy.categories[category].typical_output_tokens


def _share(value: float, largest: float) -> float:
    return value / largest if largest > 0.0 else 0.0


def utility_scores(
    pairs: Sequence[PairFigures], policy: Policy, categories: Sequence[str]
) -> dict[str, dict[str, float]]:
    """pair -> category -> utility (formula in the module docstring)."""
    weights = policy.utility_weights
    scores: dict[str, dict[str, float]] = {p.pair: {} for p in pairs}
    for category in categories:
        n_in, n_out = category_workload(policy, category)
        cost = {p.pair: p.cost_usd(n_in, n_out) for p in pairs}
        latency = {p.pair: p.latency.latency_s(n_in, n_out, 1) for p in pairs}
        max_cost = max(cost.values(), default=0.0)
        max_latency = max(latency.values(), default=0.0)
        for p in pairs:
            scores[p.pair][category] = (
                weights.accuracy * p.accuracy_in(category)
                - weights.cost * _share(cost[p.pair], max_cost)
                - weights.latency * _share(latency[p.pair], max_latency)
            )
    return scores


def _speed(m: LatencyModel, top: int) -> list[float]:
    """The model's TTFT of an empty prompt, TTFT per input token and TPOT at each whole load
    1..top, then the per-load slopes that extend it: the model is linear between whole loads
    (its profiled levels are whole loads), so no worse at each of them is no worse at every
    load."""
    at = range(1, top + 1)
    return [
        *(m.ttft_s(0, load) for load in at),
        *(m.ttft_per_input_at(load) for load in at),
        *(m.tpot_s(load) for load in at),
        m.ttft_per_load_s,
        m.tpot_per_load_s,
    ]


def _lower_is_better(p: PairFigures, categories: Sequence[str], top: int) -> list[float]:
    return [
        p.input_usd_per_mtok,
        p.output_usd_per_mtok,
        *_speed(p.latency, top),
        -float(p.context_length),
        *(-p.accuracy_in(c) for c in categories),
        *(-p.bound.get(c, 0.0) for c in categories),
    ]


def dominates(b: PairFigures, a: PairFigures, categories: Sequence[str]) -> bool:
    """True when `b` dominates `a` (definition in the module docstring)."""
    if a.family != b.family or a.pair == b.pair:
        return False
    top = max(a.latency.max_profiled_load, b.latency.max_profiled_load)
    fb, fa = _lower_is_better(b, categories, top), _lower_is_better(a, categories, top)
    no_worse = all(x <= y for x, y in zip(fb, fa, strict=True))
    return no_worse and any(x < y for x, y in zip(fb, fa, strict=True))


@dataclass(frozen=True, slots=True)
class Pruning:
    kept: tuple[PairFigures, ...]
    pruned: tuple[tuple[str, str], ...]  # (pair, dominated_by), sorted by pair


def prune_dominated(
    pairs: Sequence[PairFigures], categories: Sequence[str], protected: Collection[str]
) -> Pruning:
    """Drop dominated pairs except `protected` ones (baselines, the shadow default pair).

    `dominated_by` names a dominator that stays in the table, the first by pair name; since
    dominance is transitive such a dominator always exists.
    """
    dominators = {
        a.pair: sorted(b.pair for b in pairs if dominates(b, a, categories))
        for a in pairs
        if a.pair not in protected
    }
    dropped = {pair for pair, by in dominators.items() if by}
    pruned = tuple(
        (pair, next((b for b in by if b not in dropped), by[0]))
        for pair, by in sorted(dominators.items())
        if by
    )
    kept = tuple(p for p in pairs if p.pair not in dropped)
    return Pruning(kept=kept, pruned=pruned)
