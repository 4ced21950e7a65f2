"""Grade one replay: cost, budget attainment, accuracy per category and floor, share per pair.

PURE apart from the graders: text answers by the profiler's text scorers (pure), code items
with `tests` by running them as the profiler does (`contracts.code_tests`: a sandboxed child
per answer, 2 at once from worker threads; `grade` is called off any event loop). Errors count
as missed budgets and wrong answers: a request that got no answer met neither.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from bench.common.stats import quantile
from bench.quality.results import CategoryOutcome, FloorGroup, PolicyOutcome
from bench.quality.trace import TraceRequest
from contracts.answer_scoring import Scorer
from contracts.code_tests import CodeTestRunner, Scoring, score_answer_blocking

Z_95_ONE_SIDED = 1.645
CODE_AT_ONCE = 2  # code items' test programs run at a time (as the profiler's runner)


def floor_met(correct: int, n: int, floor: float) -> bool:
    """Accuracy is not significantly below `floor` (one-sided 95%, normal approximation)."""
    if n == 0:
        return True
    margin = Z_95_ONE_SIDED * math.sqrt(floor * (1 - floor) / n)
    return correct / n >= floor - margin


def is_correct(code: CodeTestRunner, req: TraceRequest, result: Mapping[str, Any]) -> bool:
    """A 200 answer the item's scorer accepts: its tests where it carries them (a chat
    answer: its first fenced code block, else all of it), else its text scorer."""
    if result.get("status") != 200:
        return False
    item = Scoring("", req.expected, Scorer(req.scorer), tests=req.tests)
    return score_answer_blocking(code, str(result.get("text", "")), item)


def correct_by_id(
    trace: Sequence[TraceRequest], by_id: Mapping[int, Mapping[str, Any]]
) -> dict[int, bool]:
    """Each request's mark; the code items' programs run `CODE_AT_ONCE` at a time."""
    code = CodeTestRunner(at_once=CODE_AT_ONCE)
    with ThreadPoolExecutor(CODE_AT_ONCE) as pool:
        marks = pool.map(lambda req: is_correct(code, req, by_id.get(req.id, {})), trace)
        return dict(zip((req.id for req in trace), marks, strict=True))


def request_cost_usd(result: Mapping[str, Any], prices: Mapping[str, tuple[float, float]]) -> float:
    """Usage tokens at the serving pair's table prices (USD per million tokens)."""
    pair, usage = result.get("pair"), result.get("usage") or {}
    if result.get("status") != 200 or pair not in prices:
        return 0.0
    price_in, price_out = prices[str(pair)]
    tokens_in = int(usage.get("prompt_tokens", 0))
    tokens_out = int(usage.get("completion_tokens", 0))
    return (tokens_in * price_in + tokens_out * price_out) / 1e6


def _categories(
    trace: Sequence[TraceRequest], correct: Mapping[int, bool]
) -> tuple[CategoryOutcome, ...]:
    groups: dict[str, dict[float, list[bool]]] = defaultdict(lambda: defaultdict(list))
    for req in trace:
        groups[req.category][req.min_accuracy].append(correct[req.id])
    outcomes = []
    for category in sorted(groups):
        floor_groups = []
        for floor in sorted(groups[category]):
            marks = groups[category][floor]
            n, ok = len(marks), sum(marks)
            floor_groups.append(FloorGroup(floor, n, ok, ok / n, floor_met(ok, n, floor)))
        n = sum(g.requests for g in floor_groups)
        ok = sum(g.correct for g in floor_groups)
        outcomes.append(CategoryOutcome(category, n, ok, ok / n, tuple(floor_groups)))
    return tuple(outcomes)


def grade(
    policy: str,
    load: float,
    rate_rps: float,
    trace: Sequence[TraceRequest],
    results: Sequence[Mapping[str, Any]],
    prices: Mapping[str, tuple[float, float]],
) -> PolicyOutcome:
    by_id = {int(r["id"]): r for r in results}
    correct = correct_by_id(trace, by_id)
    met = sum(
        1
        for req in trace
        if by_id.get(req.id, {}).get("status") == 200
        and float(by_id[req.id]["latency_s"]) * 1000 <= req.budget_ms
    )
    ok = [r for r in results if r.get("status") == 200]
    latencies = sorted(float(r["latency_s"]) * 1000 for r in results)
    pairs = Counter(str(r.get("pair")) for r in ok)
    cost = sum(request_cost_usd(r, prices) for r in results)
    n = len(trace)
    return PolicyOutcome(
        policy=policy,
        load=load,
        rate_rps=round(rate_rps, 2),
        requests=n,
        ok=len(ok),
        cost_usd_per_1k=cost / n * 1000 if n else math.nan,
        budget_attainment=met / n if n else math.nan,
        p50_latency_ms=quantile(latencies, 0.5),
        p99_latency_ms=quantile(latencies, 0.99),
        categories=_categories(trace, correct),
        share_by_pair={p: c / len(ok) for p, c in pairs.items()} if ok else {},
    )
