"""Decision -> the JSON `POST /v1/route` answers with, including a summary an operator can read.

PURE: formatting only, no decisions. Shows endpoint ids, never endpoint URLs.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

from data_plane.domain import (
    Candidate,
    CompiledTable,
    NoRoute,
    NoRouteReason,
    Rejected,
    RouteDecision,
    RouteReason,
)

_REJECTION_WORDS = {
    "not_allowed_by_model": "not allowed by the model field",
    "breaker_open": "breaker open",
    "context_too_long": "context too long",
    "below_accuracy_floor": "below the accuracy floor",
    "too_slow": "too slow",
    "too_expensive": "too expensive",
}


def _candidate(c: Candidate, category: str) -> dict[str, Any]:
    return {
        "pair": c.pair.pair,
        "endpoints": [e.id for e in c.endpoints],
        "load": c.load,
        "input_tokens": c.input_tokens,
        "output_tokens": c.output_tokens,
        "predicted_ttft_s": round(c.predicted_ttft_s, 6),
        "predicted_latency_s": round(c.predicted_latency_s, 6),
        "estimated_cost_usd": c.estimated_cost_usd,
        "accuracy": c.pair.accuracy.get(category, 0.0),
        "accuracy_bound": c.pair.accuracy_bound.get(category, 0.0),
    }


def _rejected(rejected: Sequence[Rejected]) -> list[dict[str, str]]:
    return [{"pair": r.pair, "reason": r.reason.value, "detail": r.detail} for r in rejected]


def _rejection_counts(rejected: Sequence[Rejected]) -> str:
    if not rejected:
        return "No pair was rejected."
    counts = Counter(r.reason.value for r in rejected)
    parts = ", ".join(f"{n} {_REJECTION_WORDS[reason]}" for reason, n in counts.items())
    return f"{len(rejected)} pair(s) rejected ({parts})."


def _budget_words(d: RouteDecision) -> str:
    latency = "no latency budget" if d.budget_latency_s is None else f"{d.budget_latency_s:.2f} s"
    return f"latency budget {latency}, accuracy floor {d.min_accuracy:.2f}"


def _choice_words(d: RouteDecision) -> str:
    c = d.candidates[0]
    accuracy = c.pair.accuracy.get(d.category, 0.0)
    basis = c.pair.floor_basis.get(d.category)
    measured = f"accuracy {accuracy:.2f} on {d.category}" if basis is None else f"accuracy {basis}"
    return (
        f"{c.pair.pair} (predicted {c.predicted_latency_s:.2f} s at load {c.load:g}, "
        f"estimated ${c.estimated_cost_usd:.3g}, {measured})"
    )


def _rollout_summary(d: RouteDecision) -> str:
    where = (
        "Shadow mode sends traffic to the default pair"
        if d.reason is RouteReason.SHADOW
        else "This request fell outside the canary fraction and goes to the baseline"
    )
    would = ""
    if d.adaptive is not None:
        a = d.adaptive
        would = f" The router would have chosen {a.candidates[0].pair.pair} ({a.reason})."
    return f"{where} {_choice_words(d)}.{would}"


def _summary(d: RouteDecision) -> str:
    if d.reason in (RouteReason.SHADOW, RouteReason.CANARY_BASELINE):
        return _rollout_summary(d)
    head = f"A {d.category} request (complexity {d.complexity:.2f}) for model {d.alias!r}"
    if d.reason is RouteReason.LATENCY_RELAXED:
        text = (
            f"{head}: no pair above the floor meets the time budget at current load "
            f"({_budget_words(d)}). Best-effort mode kept the floor and relaxed latency: the "
            f"fastest pair above the floor is {_choice_words(d)}."
        )
    elif d.reason is RouteReason.FLOOR_RELAXED:
        text = (
            f"{head}: no healthy pair reaches the accuracy floor {d.min_accuracy:.2f}. "
            f"Best-effort mode serves the most accurate healthy pair, {_choice_words(d)}."
        )
    else:
        text = (
            f"{head} went to {_choice_words(d)}, the cheapest of {len(d.candidates)} "
            f"feasible pair(s) under {_budget_words(d)}."
        )
    fallbacks = [c.pair.pair for c in d.candidates[1:]]
    chain = f" Fallbacks in order: {', '.join(fallbacks)}." if fallbacks else " No fallback pair."
    return f"{text}{chain} {_rejection_counts(d.rejected)}"


def _no_route(n: NoRoute, table: CompiledTable) -> dict[str, Any]:
    advice = {
        NoRouteReason.UNKNOWN_MODEL: "Ask for 'auto', a family or a pair this table serves.",
        NoRouteReason.ALL_UNHEALTHY: "The breakers will let probes through after their "
        "cooldown; retry later or allow more families.",
        NoRouteReason.BUDGET_INFEASIBLE: "Loosen the named constraint, or use best-effort mode.",
    }[n.reason]
    return {
        "routed": False,
        "table_version": table.version,
        "reason": n.reason.value,
        "binding": None if n.binding is None else n.binding.value,
        "detail": n.detail,
        "rejected": _rejected(n.rejected),
        "summary": f"No route: {n.detail}. {advice} {_rejection_counts(n.rejected)}",
    }


def explain(decision: RouteDecision | NoRoute, table: CompiledTable) -> dict[str, Any]:
    """JSON-ready explanation: chosen pair, reason, effective budgets, category/complexity,
    tokens, every candidate with its figures, every rejected pair with its reason, a summary."""
    if isinstance(decision, NoRoute):
        return _no_route(decision, table)
    first = decision.candidates[0]
    adaptive = decision.adaptive
    return {
        "routed": True,
        "table_version": table.version,
        "model": decision.alias,
        "pair": first.pair.pair,
        "reason": decision.reason.value,
        "category": decision.category,
        "complexity": round(decision.complexity, 4),
        "budget": {
            "mode": decision.mode.value,
            "latency_s": decision.budget_latency_s,
            "ttft_s": decision.budget_ttft_s,
            "min_accuracy": decision.min_accuracy,
            "max_cost_usd": decision.max_cost_usd,
        },
        "tokens": {"input": first.input_tokens, "output": first.output_tokens},
        "candidates": [_candidate(c, decision.category) for c in decision.candidates],
        "rejected": _rejected(decision.rejected),
        "adaptive": None
        if adaptive is None
        else {"pair": adaptive.candidates[0].pair.pair, "reason": adaptive.reason.value},
        "summary": _summary(decision),
    }
