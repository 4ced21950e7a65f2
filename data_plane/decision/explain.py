"""Decision -> the JSON `POST /v1/route` answers with, including a summary an operator can read.

PURE: formatting only, no decisions. Shows endpoint ids, never endpoint URLs.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

from data_plane.decision.rejections import RULE_WORDS
from data_plane.domain import (
    BudgetMode,
    Candidate,
    CompiledTable,
    NoRoute,
    NoRouteReason,
    Rejected,
    Rejection,
    RequestFacts,
    RouteDecision,
    RouteReason,
)


def _chance(c: Candidate) -> dict[str, Any] | None:
    """Best effort's figures for `c` (docs/data_plane.md "Best effort"), else None."""
    chance = c.chance
    if chance is None:
        return None
    return {
        "p_meet": round(chance.p_meet, 4),
        "p_accuracy": round(chance.p_accuracy, 4),
        "p_latency": round(chance.p_latency, 4),
        "floor_proven": chance.floor_proven,
        "latency_proven": chance.latency_proven,
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
        "best_effort": _chance(c),
    }


def _rejected(rejected: Sequence[Rejected]) -> list[dict[str, str]]:
    return [{"pair": r.pair, "reason": r.reason.value, "detail": r.detail} for r in rejected]


def _rejection_counts(rejected: Sequence[Rejected]) -> str:
    if not rejected:
        return "No pair was rejected."
    counts = Counter(r.reason for r in rejected)
    parts = ", ".join(f"{n} {RULE_WORDS[reason].counted}" for reason, n in counts.items())
    return f"{len(rejected)} pair(s) rejected ({parts})."


def _budget_words(d: RouteDecision) -> str:
    latency = (
        "no latency budget"
        if d.budget_latency_s is None
        else f"latency budget {d.budget_latency_s:.2f} s"
    )
    return f"{latency}, accuracy floor {d.min_accuracy:.2f}"


def _choice_words(d: RouteDecision) -> str:
    c = d.candidates[0]
    accuracy = c.pair.accuracy.get(d.category, 0.0)
    basis = c.pair.floor_basis.get(d.category)
    measured = f"accuracy {accuracy:.2f} on {d.category}" if basis is None else f"accuracy {basis}"
    return (
        f"{c.pair.pair} (predicted {c.predicted_latency_s:.2f} s at load {c.load:g}, "
        f"estimated ${c.estimated_cost_usd:.3g}, {measured})"
    )


_BEST_EFFORT = (RouteReason.LATENCY_RELAXED, RouteReason.FLOOR_RELAXED, RouteReason.UNPROVEN)
_UNPROVEN = {
    RouteReason.LATENCY_RELAXED: "its latency",
    RouteReason.FLOOR_RELAXED: "its accuracy floor",
    RouteReason.UNPROVEN: "neither its accuracy floor nor its latency",
}


def _best_effort_words(d: RouteDecision) -> str:
    """Why best effort served this pair: the chance it meets the request, and what the
    table does not prove for it."""
    c = d.candidates[0]
    chance = c.chance
    unproven = _UNPROVEN[d.reason]
    proves = "does not prove " if d.reason is not RouteReason.UNPROVEN else "proves "
    words = (
        f"no pair meets the whole budget with the table's guarantee ({_budget_words(d)}). "
        f"Best-effort mode serves the pair most likely to meet it: {_choice_words(d)}; the "
        f"table {proves}{unproven}"
    )
    if chance is None:
        return words + "."
    return words + (
        f". Estimated chance of meeting floor and budget: {chance.p_meet:.2f} "
        f"(accuracy >= floor {chance.p_accuracy:.2f}, latency within budget "
        f'{chance.p_latency:.2f}; docs/accuracy.md "Best effort").'
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
    if d.reason in _BEST_EFFORT:
        text = f"{head}: {_best_effort_words(d)}"
    else:
        which = "most precise" if d.reason is RouteReason.MOST_PRECISE_FEASIBLE else "cheapest"
        text = (
            f"{head} went to {_choice_words(d)}, the {which} of {len(d.candidates)} "
            f"feasible pair(s) under {_budget_words(d)}."
        )
    fallbacks = [c.pair.pair for c in d.candidates[1:]]
    chain = f" Fallbacks in order: {', '.join(fallbacks)}." if fallbacks else " No fallback pair."
    return f"{text}{chain} {_rejection_counts(d.rejected)}"


def _infeasible_advice(n: NoRoute) -> str:
    """What the client can change; best-effort is suggested only to a strict request, and
    never for the context length, which no mode relaxes."""
    if n.binding is Rejection.CONTEXT_TOO_LONG:
        return "No budget mode relaxes the context length."
    if n.mode is BudgetMode.BEST_EFFORT:
        return (
            "Best-effort mode already relaxed latency and the accuracy floor; it never "
            "relaxes the cost ceiling or the context length. Loosen the named constraint."
        )
    return "Loosen the named constraint, or use best-effort mode."


def _no_route(n: NoRoute, table: CompiledTable) -> dict[str, Any]:
    advice = {
        NoRouteReason.UNKNOWN_MODEL: "Ask for 'auto', a family or a pair this table serves.",
        NoRouteReason.ALL_UNHEALTHY: "The breakers will let probes through after their "
        "cooldown; retry later or allow more families.",
    }.get(n.reason) or _infeasible_advice(n)
    return {
        "routed": False,
        "table_version": table.version,
        "reason": n.reason.value,
        "binding": None if n.binding is None else n.binding.value,
        "detail": n.detail,
        "rejected": _rejected(n.rejected),
        "summary": f"No route: {n.detail}. {advice} {_rejection_counts(n.rejected)}",
    }


_FLOOR_CHECKED = (
    RouteReason.CHEAPEST_FEASIBLE,
    RouteReason.MOST_PRECISE_FEASIBLE,
    RouteReason.LATENCY_RELAXED,
)


def floor_promise(d: RouteDecision, table: CompiledTable) -> dict[str, Any] | None:
    """What the floor check promises for this request (docs/accuracy.md, "What the promise is
    per request"): per pair, at most 1 - floor_confidence; for the served pair, at most k
    times that when k of the allowed pairs are truly below the floor, k unknown but at most
    the number allowed. None when the served pair's floor was not checked with a bound
    (best effort below it, shadow or canary traffic, a table without bounds)."""
    if d.reason not in _FLOOR_CHECKED or not d.candidates[0].pair.floor_basis:
        return None
    confidence = table.policy.floor_confidence
    miss = round(1.0 - confidence, 6)
    allowed = len(table.by_alias.get(d.alias, ()))
    return {
        "per_pair_miss_at_most": miss,
        "allowed_pairs": allowed,
        "served_pair_miss_at_most": round(min(1.0, allowed * miss), 6),
        "summary": (
            f"Each pair's true accuracy on {d.category} is below its {confidence:.0%} lower "
            f"bound with probability at most {miss:.2f}. The served pair is chosen among those "
            f"that passed: if k of the {allowed} pairs this request allows are truly below the "
            f"floor, the chance that the served one is below it is at most k x {miss:.2f} "
            "(docs/accuracy.md)."
        ),
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
            "doubt_floors": dict(decision.doubt_floors),
        },
        "tokens": {"input": first.input_tokens, "output": first.output_tokens},
        "candidates": [_candidate(c, decision.category) for c in decision.candidates],
        "rejected": _rejected(decision.rejected),
        "floor_promise": floor_promise(decision, table),
        "adaptive": None
        if adaptive is None
        else {"pair": adaptive.candidates[0].pair.pair, "reason": adaptive.reason.value},
        "summary": _summary(decision),
    }


def classification_json(facts: RequestFacts, table: CompiledTable) -> dict[str, Any]:
    """What `/v1/route` shows about the category: where it came from and any doubt."""
    classifier = table.classifier
    doubt = facts.doubt
    return {
        "model_sha256": classifier.model_sha256,
        "builtin": classifier.builtin,
        "confidence_threshold": table.policy.category_confidence,
        "abstained": doubt is not None,
        "top": None if doubt is None else doubt.top,
        "top_probability": None if doubt is None else round(doubt.probability, 4),
        "plausible": [] if doubt is None else list(doubt.plausible),
        "routed_as": facts.category,
    }


def explain_request(
    result: RouteDecision | NoRoute, table: CompiledTable, facts: RequestFacts
) -> dict[str, Any]:
    """`explain`, plus where the request's category came from and any doubt (the summary
    says when the classifier was unsure and which floor it routed under)."""
    body = explain(result, table)
    body["classification"] = classification_json(facts, table)
    doubt = facts.doubt
    if doubt is not None and "summary" in body:
        body["summary"] += (
            f" The classifier was unsure (top {doubt.top} at {doubt.probability:.2f}); routed "
            f"as {doubt.routed_as}, the strictest floor among {', '.join(doubt.plausible)}"
        )
        floors = body.get("budget", {}).get("doubt_floors")
        if floors:
            also = ", ".join(f"{c} {f:.2f}" for c, f in floors.items())
            body["summary"] += f"; a pair serves only if it also meets {also} in those columns."
        else:
            body["summary"] += "."
    return body
