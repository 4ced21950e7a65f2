"""Grade a replay of the near-floor scenario against TRUE accuracy, and the oracle (PURE).

A request meets its floor when the pair that served it is, by the simulator's configured
truth, at least as accurate as the floor in the request's TRUE category; it meets its budget
when it was answered 2xx within its latency budget; it meets its SLO when both hold. A request
that got no answer met neither. The oracle knows the true accuracies and ignores queueing: per
request, the cheapest pair whose true accuracy meets the floor and whose unloaded predicted
latency fits the budget (docs/benchmarks.md).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from bench.quality.trace import TraceRequest

CHARS_PER_TOKEN = 4.0  # the simulator's default tokenizer (docs/simulator.md)


@dataclass(frozen=True, slots=True)
class TruePair:
    """A pair as the simulator configures it: prices, unloaded speed, true accuracy."""

    pair: str
    input_usd_per_mtok: float
    output_usd_per_mtok: float
    ttft_base_s: float
    ttft_per_input_token_s: float
    tpot_base_s: float
    accuracy: Mapping[str, float]

    def cost_usd(self, tokens_in: int, tokens_out: int) -> float:
        return (tokens_in * self.input_usd_per_mtok + tokens_out * self.output_usd_per_mtok) / 1e6

    def unloaded_latency_ms(self, tokens_in: int, tokens_out: int) -> float:
        """Prefill plus decode alone on the engine (no queue, no batch)."""
        prefill = self.ttft_base_s + self.ttft_per_input_token_s * tokens_in
        return (prefill + self.tpot_base_s * tokens_out) * 1000


@dataclass(frozen=True, slots=True)
class TruthOutcome:
    """One replay (or the oracle) graded against the truth."""

    mode: str  # "no header", "header", "oracle"
    load: float
    requests: int
    ok: int
    floor_attainment: float  # share of all requests served by a pair truly >= the floor
    budget_attainment: float  # share answered 2xx within budget
    slo_attainment: float  # both
    cost_usd_per_1k: float
    classifier_accuracy: float  # share of requests whose classifier's top category is true
    abstained: float  # share of requests the classifier was unsure about
    floor_misses: dict[str, int] = field(default_factory=dict)  # by true category
    share_by_pair: dict[str, float] = field(default_factory=dict)


def request_tokens(req: TraceRequest, result: Mapping[str, Any] | None) -> tuple[int, int]:
    """(input, output) tokens: the answer's usage when there is one, else the estimate the
    simulator would count (prompt characters / 4, `max_tokens` under `ignore_eos`)."""
    usage = (result or {}).get("usage") or {}
    if (result or {}).get("status") == 200 and usage:
        return int(usage.get("prompt_tokens", 0)), int(usage.get("completion_tokens", 0))
    return math.ceil(len(req.prompt) / CHARS_PER_TOKEN), req.max_tokens


def oracle_pair(
    pairs: Sequence[TruePair], req: TraceRequest, tokens_in: int, tokens_out: int
) -> tuple[TruePair, bool]:
    """(the oracle's pair, whether it meets floor and budget). The cheapest pair truly at or
    above the floor whose unloaded latency fits the budget; when none fits both, the cheapest
    that meets the floor, else the truly most accurate pair (a miss either way)."""
    by_cost = sorted(pairs, key=lambda p: (p.cost_usd(tokens_in, tokens_out), p.pair))
    meets = [p for p in by_cost if p.accuracy.get(req.category, 0.0) >= req.min_accuracy]
    fits = [p for p in meets if p.unloaded_latency_ms(tokens_in, tokens_out) <= req.budget_ms]
    if fits:
        return fits[0], True
    if meets:
        return meets[0], False
    return max(by_cost, key=lambda p: p.accuracy.get(req.category, 0.0)), False


def _share(count: int, n: int) -> float:
    return count / n if n else math.nan


def grade_oracle(trace: Sequence[TraceRequest], pairs: Sequence[TruePair]) -> TruthOutcome:
    """The oracle's SLO attainment and cost over the trace (estimated tokens)."""
    cost, met = 0.0, 0
    used: Counter[str] = Counter()
    for req in trace:
        tokens = request_tokens(req, None)
        pair, ok = oracle_pair(pairs, req, *tokens)
        cost += pair.cost_usd(*tokens)
        met += ok
        used[pair.pair] += 1
    n = len(trace)
    return TruthOutcome(
        mode="oracle",
        load=1.0,
        requests=n,
        ok=n,
        floor_attainment=_share(met, n),
        budget_attainment=_share(met, n),
        slo_attainment=_share(met, n),
        cost_usd_per_1k=cost / n * 1000 if n else math.nan,
        classifier_accuracy=1.0,
        abstained=0.0,
        share_by_pair={p: c / n for p, c in used.items()},
    )


def grade_truth(
    mode: str,
    load: float,
    trace: Sequence[TraceRequest],
    results: Sequence[Mapping[str, Any]],
    pairs: Mapping[str, TruePair],
    routed: Mapping[int, tuple[str, bool]],
) -> TruthOutcome:
    """`routed`: request id -> (the classifier's top category, whether it abstained); empty
    when the client sent the category (then it is the true one)."""
    by_id = {int(r["id"]): r for r in results}
    floor_ok = budget_ok = slo_ok = right = unsure = 0
    cost = 0.0
    misses: Counter[str] = Counter()
    used: Counter[str] = Counter()
    for req in trace:
        result = by_id.get(req.id, {})
        served = pairs.get(str(result.get("pair"))) if result.get("status") == 200 else None
        truly = served is not None and served.accuracy.get(req.category, 0.0) >= req.min_accuracy
        in_budget = served is not None and float(result["latency_s"]) * 1000 <= req.budget_ms
        floor_ok, budget_ok, slo_ok = (
            floor_ok + truly,
            budget_ok + in_budget,
            slo_ok + (truly and in_budget),
        )
        if not truly:
            misses[req.category] += 1
        if served is not None:
            cost += served.cost_usd(*request_tokens(req, result))
            used[served.pair] += 1
        category, abstained = routed.get(req.id, (req.category, False))
        right += category == req.category
        unsure += abstained
    n, ok = len(trace), sum(used.values())
    return TruthOutcome(
        mode=mode,
        load=load,
        requests=n,
        ok=ok,
        floor_attainment=_share(floor_ok, n),
        budget_attainment=_share(budget_ok, n),
        slo_attainment=_share(slo_ok, n),
        cost_usd_per_1k=cost / n * 1000 if n else math.nan,
        classifier_accuracy=_share(right, n),
        abstained=_share(unsure, n),
        floor_misses=dict(sorted(misses.items())),
        share_by_pair={p: c / ok for p, c in used.items()} if ok else {},
    )
