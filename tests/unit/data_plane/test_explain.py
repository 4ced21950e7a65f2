"""explain.py: the /v1/route JSON and its operator summary; never an endpoint URL."""

from __future__ import annotations

import json
import random
from typing import Any

from data_plane.decision.choose import choose_route
from data_plane.decision.explain import explain
from data_plane.decision.rejections import RULE_WORDS
from data_plane.decision.rollout import apply_rollout
from data_plane.domain import (
    Budget,
    BudgetMode,
    CompiledTable,
    HealthView,
    NoRoute,
    Rejection,
    RequestFacts,
    RouteDecision,
    RouteRequest,
)
from tests.unit.data_plane.tables import fleet


def run(
    t: CompiledTable, alias: str = "auto", health: HealthView | None = None, **budget: Any
) -> RouteDecision | NoRoute:
    facts = RequestFacts(alias, "chat", 0.42, 2000, 100)
    req = RouteRequest(facts, Budget(**budget))
    return choose_route(t, req, health or HealthView(), random.Random(0))


def _no_urls(doc: dict[str, Any]) -> None:
    text = json.dumps(doc)
    assert "http" not in text
    assert "10.0.0." not in text


def test_routed_decision() -> None:
    t = fleet()
    doc = explain(run(t, latency_s=2.0, max_cost_usd=0.01), t)
    _no_urls(doc)
    assert doc["routed"] is True
    assert doc["pair"] == doc["candidates"][0]["pair"] == "llama@awq-int4"
    assert doc["reason"] == "cheapest_feasible"
    assert doc["category"] == "chat"
    assert doc["complexity"] == 0.42
    assert doc["budget"] == {
        "mode": "best-effort",
        "latency_s": 2.0,
        "ttft_s": None,
        "min_accuracy": 0.0,
        "max_cost_usd": 0.01,
        "doubt_floors": {},
    }
    assert doc["tokens"] == {"input": 500, "output": 100}
    first = doc["candidates"][0]
    assert set(first) == {
        "pair",
        "endpoints",
        "load",
        "input_tokens",
        "output_tokens",
        "predicted_ttft_s",
        "predicted_latency_s",
        "estimated_cost_usd",
        "accuracy",
        "accuracy_bound",
        "best_effort",
    }
    assert first["best_effort"] is None  # a feasible pair: nothing to estimate
    assert first["endpoints"][0].startswith("llama@awq-int4#")
    assert first["predicted_latency_s"] <= 2.0
    assert {r["reason"] for r in doc["rejected"]} == {"too_slow"}
    assert all(r["detail"].startswith("predicted") for r in doc["rejected"])
    assert doc["adaptive"] is None
    summary = doc["summary"]
    assert "A chat request (complexity 0.42) for model 'auto' went to llama@awq-int4" in summary
    assert "the cheapest of" in summary
    assert "latency budget 2.00 s" in summary
    assert "too slow" in summary
    json.dumps(doc)


def test_fallbacks_listed_in_summary() -> None:
    t = fleet()
    doc = explain(run(t), t)
    assert "Fallbacks in order: qwen@int8-w8a8, llama@fp8" in doc["summary"]
    assert "No pair was rejected." in doc["summary"]
    assert "no latency budget" in doc["summary"]


def test_single_candidate_says_no_fallback() -> None:
    t = fleet()
    doc = explain(run(t, alias="llama@fp8"), t)
    assert "No fallback pair." in doc["summary"]
    assert "4 pair(s) rejected (4 not allowed by the model field)." in doc["summary"]


def test_relaxed_summaries() -> None:
    t = fleet()
    latency = explain(run(t, latency_s=0.5, min_accuracy=0.8), t)
    assert latency["reason"] == "best_effort_latency_relaxed"
    assert "the table does not prove its latency" in latency["summary"]
    assert latency["candidates"][0]["best_effort"] == {
        "p_meet": 0.0,  # no latency spread in this table: 1.41 s for 0.5 s misses for sure
        "p_accuracy": 0.9263,  # 86/100, P(true accuracy >= 0.80)
        "p_latency": 0.0,
        "floor_proven": True,
        "latency_proven": False,
    }
    assert (
        "chance of meeting floor and budget: 0.00 (accuracy >= floor 0.93" in (latency["summary"])
    )
    floor = explain(run(t, min_accuracy=0.99), t)
    assert floor["reason"] == "best_effort_below_floor"
    assert "(no latency budget, accuracy floor 0.99)" in floor["summary"]
    assert "the table does not prove its accuracy floor" in floor["summary"]
    both = explain(run(t, latency_s=0.5, min_accuracy=0.99), t)
    assert both["reason"] == "best_effort_unproven"
    assert "the table proves neither its accuracy floor nor its latency" in both["summary"]


def test_rollout_summaries_name_the_adaptive_choice() -> None:
    t = fleet(policy={"shadow": {"enabled": True, "default_pair": "llama@bf16"}})
    d = run(t)
    assert isinstance(d, RouteDecision)
    doc = explain(apply_rollout(d, t, 0.0), t)
    assert doc["reason"] == "shadow"
    assert doc["pair"] == "llama@bf16"
    assert doc["adaptive"] == {"pair": "llama@awq-int4", "reason": "cheapest_feasible"}
    assert doc["summary"].startswith("Shadow mode sends traffic to the default pair llama@bf16")
    assert "would have chosen llama@awq-int4" in doc["summary"]
    _no_urls(doc)
    t2 = fleet(policy={"canary_fraction": 0.0})
    d2 = run(t2)
    assert isinstance(d2, RouteDecision)
    doc2 = explain(apply_rollout(d2, t2, 0.5), t2)
    assert doc2["reason"] == "canary_baseline"
    assert "outside the canary fraction" in doc2["summary"]


def test_rollout_summary_without_adaptive() -> None:
    from dataclasses import replace

    from data_plane.domain import RouteReason

    t = fleet()
    d = run(t)
    assert isinstance(d, RouteDecision)
    doc = explain(replace(d, reason=RouteReason.CANARY_BASELINE), t)
    assert "would have chosen" not in doc["summary"]


def test_no_route_documents() -> None:
    t = fleet()
    unknown = explain(run(t, alias="gpt-4"), t)
    assert unknown["routed"] is False
    assert unknown["reason"] == "unknown_model"
    assert unknown["binding"] is None
    assert "Ask for 'auto'" in unknown["summary"]

    strict = explain(run(t, latency_s=0.5, mode=BudgetMode.STRICT), t)
    assert strict["reason"] == "budget_infeasible"
    assert strict["binding"] == "too_slow"
    assert len(strict["rejected"]) == 5
    assert strict["summary"].startswith("No route: no pair meets the budget (strict mode")
    assert "Loosen the named constraint" in strict["summary"]
    _no_urls(strict)

    every = frozenset(e.id for p in t.pairs for e in p.endpoints)
    down = explain(run(t, health=HealthView(open_endpoints=every)), t)
    assert down["reason"] == "all_unhealthy"
    assert "breaker open" in down["summary"]
    assert "retry later" in down["summary"]


def test_every_rejection_rule_has_its_words_in_one_table() -> None:
    # The summary, the strict-mode error and its `param` all read RULE_WORDS: a rule
    # without words would fail at the first request that hits it.
    assert set(RULE_WORDS) == set(Rejection)
    budget_rules = [
        RULE_WORDS[r] for r in Rejection if r not in (Rejection.NOT_ALLOWED, Rejection.BREAKER_OPEN)
    ]
    assert all(w.param is not None for w in budget_rules)


def test_quality_first_decision_is_explained_as_the_most_precise() -> None:
    t = fleet({"objective": "quality-first"})
    doc = explain(run(t, latency_s=10.0), t)
    assert doc["reason"] == "most_precise_feasible"
    assert doc["pair"].endswith("@bf16")
    assert "the most precise of" in doc["summary"]
