"""Section 3b's edge rows: explicit floors 1-3 points under some pairs' truths (issue 24).

PURE grading. The trace's `X-Min-Accuracy` floors sit just under what some pair truly does,
so on 100 eval items part of it cannot be proven. Against the simulator's truth this says:
which share some pair can serve with the table's guarantee at no load (provable: the data
plane's own strict decision on the table, idle), how those requests fare, how the requests
that some pair truly meets but none provably does fare (best effort's domain), whether floors
served under the guarantee hold, what it costs against the truth oracle and the cheapest
provable choice, and whether best effort's stated chance (`X-Route-Reason`'s `p_meet`) is
calibrated.
"""

from __future__ import annotations

import math
import random
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from bench.floors.score import TruePair, oracle_pair, request_tokens
from bench.quality.trace import TraceRequest
from data_plane.decision.choose import choose_route
from data_plane.domain import (
    Budget,
    BudgetMode,
    CategoryDoubt,
    CompiledTable,
    HealthView,
    RequestFacts,
    RouteDecision,
    RouteRequest,
)
from data_plane.request.category import classify_text, decide_category

POINTS_UNDER = (0.01, 0.02, 0.03)
_P_MEET = re.compile(r"p_meet ([0-9.]+)")
CALIBRATION_BINS = 5


def edge_floors(pairs: Sequence[TruePair], categories: Sequence[str]) -> dict[str, list[float]]:
    """Per category, every floor 1, 2 or 3 points under some pair's truth."""
    return {
        c: sorted({round(p.accuracy[c] - d, 2) for p in pairs for d in POINTS_UNDER})
        for c in categories
    }


def provable_pair(
    table: CompiledTable, req: TraceRequest, doubt: CategoryDoubt | None = None
) -> str | None:
    """The pair a strict decision on the idle table gives the request (its category sent),
    i.e. the cheapest pair proven to meet floor and budget; None when none is. With `doubt`
    (the classifier's, no header): under the category it routes as, every plausible floor."""
    category = req.category if doubt is None else doubt.routed_as
    facts = RequestFacts("auto", category, 0.5, len(req.prompt), req.max_tokens, doubt=doubt)
    budget = Budget(
        latency_s=req.budget_ms / 1000,
        min_accuracy=req.min_accuracy if doubt is None else None,
        mode=BudgetMode.STRICT,
        category=req.category if doubt is None else None,
    )
    result = choose_route(table, RouteRequest(facts, budget), HealthView(), random.Random(0))
    return result.candidates[0].pair.pair if isinstance(result, RouteDecision) else None


def doubt_of(table: CompiledTable, req: TraceRequest) -> CategoryDoubt | None:
    """The table classifier's doubt about the request's prompt (the data plane's own code)."""
    scorer = table.classifier
    probabilities, _ = classify_text(scorer, req.prompt)
    policy = table.policy
    return decide_category(
        scorer.categories,
        probabilities,
        table.categories,
        policy.category_confidence,
        policy.doubt_category,
    )[1]


def doubt_costs(
    table: CompiledTable, trace: Sequence[TraceRequest], pairs: Mapping[str, TruePair]
) -> dict[tuple[tuple[str, ...], str], tuple[int, float]]:
    """For the requests the classifier abstains on: (plausible categories, the pair a strict
    idle decision under doubt gives) -> (requests, their cost on estimated tokens); the pair
    is "none" when nothing proves every plausible floor."""
    out: dict[tuple[tuple[str, ...], str], tuple[int, float]] = {}
    for req in trace:
        doubt = doubt_of(table, req)
        if doubt is None:
            continue
        pair = provable_pair(table, req, doubt) or "none"
        tokens = request_tokens(req, None)
        key = (tuple(sorted(doubt.plausible)), pair)
        n, cost = out.get(key, (0, 0.0))
        out[key] = (n + 1, cost + (pairs[pair].cost_usd(*tokens) if pair in pairs else 0.0))
    return out


def provable_oracle(
    table: CompiledTable, trace: Sequence[TraceRequest], pairs: Mapping[str, TruePair]
) -> tuple[float, int]:
    """(cost per 1,000 requests, requests nothing proves) of the cheapest-provable oracle: per
    request, the pair a strict decision on the idle table gives it under its TRUE category,
    priced on the estimated tokens as the truth oracle is. No router that keeps the table's
    guarantee on every request can pay less with this table, whatever it knows of the
    category. A request nothing proves is priced at the truth oracle's pair (a lower figure)."""
    truth = list(pairs.values())
    cost, unprovable = 0.0, 0
    for req in trace:
        tokens = request_tokens(req, None)
        cheapest = provable_pair(table, req)
        if cheapest is None:
            unprovable += 1
            cost += oracle_pair(truth, req, *tokens)[0].cost_usd(*tokens)
        else:
            cost += pairs[cheapest].cost_usd(*tokens)
    return (cost / len(trace) * 1000 if trace else math.nan), unprovable


@dataclass(frozen=True, slots=True)
class CalibrationBin:
    low: float
    high: float
    requests: int
    predicted: float  # mean stated p_meet
    observed: float  # share that met floor and budget


@dataclass(frozen=True, slots=True)
class EdgeOutcome:
    requests: int
    provable_share: float
    provable_slo: float  # SLO attainment on provable requests
    unprovable_feasible: int  # truth-feasible requests no pair provably serves
    unprovable_feasible_slo: float
    guaranteed: int  # requests served under the guarantee (no best_effort reason)
    guaranteed_floor: float  # their floor attainment by true accuracy
    best_effort: int
    slo_attainment: float
    cost_usd_per_1k: float
    oracle_cost_usd_per_1k: float  # the truth oracle over the whole trace
    provable_cost_ratio: float  # Gearbox / cheapest provable, on provable requests
    calibration: tuple[CalibrationBin, ...] = ()
    share_by_reason: dict[str, float] = field(default_factory=dict)
    mode: str = "explicit floors"  # with the category sent, or not ("..., no header")
    load: float = 1.0


def _calibration(stated: Sequence[tuple[float, bool]]) -> tuple[CalibrationBin, ...]:
    bins: dict[int, list[tuple[float, bool]]] = {}
    for p, met in stated:
        bins.setdefault(min(int(p * CALIBRATION_BINS), CALIBRATION_BINS - 1), []).append((p, met))
    return tuple(
        CalibrationBin(
            low=k / CALIBRATION_BINS,
            high=(k + 1) / CALIBRATION_BINS,
            requests=len(rows),
            predicted=sum(p for p, _ in rows) / len(rows),
            observed=sum(met for _, met in rows) / len(rows),
        )
        for k, rows in sorted(bins.items())
    )


def _share(count: float, n: int) -> float:
    return count / n if n else math.nan


def grade_edge(
    trace: Sequence[TraceRequest],
    results: Sequence[Mapping[str, Any]],
    pairs: Mapping[str, TruePair],
    provable: Mapping[int, str | None],
    mode: str = "explicit floors",
    load: float = 1.0,
) -> EdgeOutcome:
    """`provable`: request id -> the cheapest provable pair under the request's TRUE category
    (None: nothing provable); `mode` and `load` name the run."""
    by_id = {int(r["id"]): r for r in results}
    truth = list(pairs.values())
    counts = {"provable_met": 0, "feasible": 0, "feasible_met": 0, "guaranteed": 0, "held": 0}
    met_all, cost, oracle_cost, mine_provable, cheapest_provable = 0, 0.0, 0.0, 0.0, 0.0
    stated: list[tuple[float, bool]] = []
    reasons: dict[str, int] = {}
    for req in trace:
        r = by_id.get(req.id, {})
        served = pairs.get(str(r.get("pair"))) if r.get("status") == 200 else None
        truly = served is not None and served.accuracy.get(req.category, 0.0) >= req.min_accuracy
        met = truly and float(r["latency_s"]) * 1000 <= req.budget_ms
        met_all += met
        tokens = request_tokens(req, None)
        oracle, feasible = oracle_pair(truth, req, *tokens)
        oracle_cost += oracle.cost_usd(*tokens)
        used = request_tokens(req, r)  # the answer's usage: both sides priced on it
        spent = served.cost_usd(*used) if served is not None else 0.0
        cost += spent
        reason = str(r.get("reason") or "")
        reasons[reason.split(";")[0] or "no answer"] = (
            reasons.get(reason.split(";")[0] or "no answer", 0) + 1
        )
        cheapest = provable.get(req.id)
        if cheapest is not None:
            counts["provable_met"] += met
            mine_provable += spent
            cheapest_provable += pairs[cheapest].cost_usd(*used)
        elif feasible:
            counts["feasible"] += 1
            counts["feasible_met"] += met
        if served is not None and not reason.startswith("best_effort"):
            counts["guaranteed"] += 1
            counts["held"] += truly
        found = _P_MEET.search(reason)
        if found is not None:
            stated.append((float(found.group(1)), met))
    n = len(trace)
    n_provable = sum(1 for req in trace if provable.get(req.id) is not None)
    return EdgeOutcome(
        requests=n,
        provable_share=_share(n_provable, n),
        provable_slo=_share(counts["provable_met"], n_provable),
        unprovable_feasible=counts["feasible"],
        unprovable_feasible_slo=_share(counts["feasible_met"], counts["feasible"]),
        guaranteed=counts["guaranteed"],
        guaranteed_floor=_share(counts["held"], counts["guaranteed"]),
        best_effort=len(stated),
        slo_attainment=_share(met_all, n),
        cost_usd_per_1k=cost / n * 1000 if n else math.nan,
        oracle_cost_usd_per_1k=oracle_cost / n * 1000 if n else math.nan,
        provable_cost_ratio=mine_provable / cheapest_provable if cheapest_provable else math.nan,
        calibration=_calibration(stated),
        share_by_reason={k: v / n for k, v in sorted(reasons.items())} if n else {},
        mode=mode,
        load=load,
    )
