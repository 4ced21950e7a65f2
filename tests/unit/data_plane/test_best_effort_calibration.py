"""Best effort's chance is calibrated on synthetic data with a known truth (issue 24, item 1):
among requests served at chance p, about p meet their floor and their latency budget.

The truth: each pair has a true accuracy (uniform in [0.6, 1]) and a log-normal latency
around a known median; the table carries what a profile of it would: counts of 100 eval
items drawn from the true accuracy, the p95 line and the spread of ln(latency). Requests ask
floors and budgets near what the fleet can do, so that often nothing is proven; for each
best-effort decision the served pair meets its SLO when its true accuracy is at least the
floor and a latency drawn from its true distribution is within the budget.
"""

from __future__ import annotations

import math
import random
from typing import Any

from contracts.accuracy_bound import lower_bound
from data_plane.decision.choose import choose_route
from data_plane.decision.compile import compile_table
from data_plane.domain import Budget, HealthView, RequestFacts, RouteDecision, RouteRequest
from tests.unit.data_plane.tables import entry, table

Z95 = 1.6448536269514722
OUTPUT_TOKENS = 100


def _fleet(rng: random.Random) -> tuple[Any, dict[str, tuple[float, float, float]]]:
    """A table of four one-pair families and, per pair, (true accuracy, median s, spread)."""
    entries, truth = [], {}
    for i in range(4):
        true_acc = rng.uniform(0.6, 1.0)
        right = sum(rng.random() < true_acc for _ in range(100))
        spread = rng.uniform(0.05, 0.3)
        tpot_median = rng.uniform(0.01, 0.04)
        # the line is the p95: median x exp(z95 x spread); TTFT negligible (1 ms)
        e = entry(
            f"f{i}",
            "bf16",
            input_usd_per_mtok=0.1 * (i + 1),
            output_usd_per_mtok=0.4 * (i + 1),
            ttft_base_s=0.001 * math.exp(Z95 * spread),
            ttft_per_input_token_s=0.0,
            ttft_per_load_s=0.0,
            tpot_base_s=tpot_median * math.exp(Z95 * spread),
            tpot_per_load_s=0.0,
            log_spread=spread,
        )
        e["accuracy"] = {"chat": right / 100}
        e["accuracy_n"] = {"chat": 100}
        e["accuracy_right"] = {"chat": right}
        e["accuracy_bound"] = {"chat": lower_bound(right, 100, 0.9) if right else 0.0}
        e["utility"] = {"chat": 1.0}
        entries.append(e)
        truth[e["pair"]] = (true_acc, 0.001 + OUTPUT_TOKENS * tpot_median, spread)
    return compile_table(table(entries)), truth


def _served(n_fleets: int, requests_per_fleet: int, seed: int) -> list[tuple[float, bool]]:
    """(chance, met) for every best-effort decision."""
    rng = random.Random(seed)
    out = []
    for _ in range(n_fleets):
        t, truth = _fleet(rng)
        for _ in range(requests_per_fleet):
            floor = rng.uniform(0.7, 0.98)
            budget_s = rng.uniform(0.8, 4.0)
            facts = RequestFacts("auto", "chat", 0.5, 40, OUTPUT_TOKENS)
            req = RouteRequest(facts, Budget(latency_s=budget_s, min_accuracy=floor))
            d = choose_route(t, req, HealthView(), rng)
            assert isinstance(d, RouteDecision)
            chance = d.candidates[0].chance
            if chance is None:
                continue  # proven: not best effort's to estimate
            true_acc, median_s, spread = truth[d.candidates[0].pair.pair]
            latency_s = median_s * math.exp(spread * rng.gauss(0.0, 1.0))
            out.append((chance.p_meet, true_acc >= floor and latency_s <= budget_s))
    return out


def test_among_requests_served_at_chance_p_about_p_meet_their_slo() -> None:
    served = _served(n_fleets=150, requests_per_fleet=40, seed=7)
    assert len(served) > 3000
    bins: dict[int, list[tuple[float, bool]]] = {}
    for p, met in served:
        bins.setdefault(min(int(p * 5), 4), []).append((p, met))
    checked = 0
    for rows in bins.values():
        if len(rows) < 150:
            continue
        predicted = sum(p for p, _ in rows) / len(rows)
        observed = sum(met for _, met in rows) / len(rows)
        # the eval counts of a fleet are shared by its requests: allow 0.08 on top of noise
        noise = 3 * math.sqrt(max(predicted * (1 - predicted), 0.01) / len(rows))
        assert abs(observed - predicted) <= noise + 0.08, (predicted, observed, len(rows))
        checked += 1
    assert checked >= 4  # the chances spread over the range, not all near 0 or 1
    overall = sum(met for _, met in served) / len(served)
    assert abs(overall - sum(p for p, _ in served) / len(served)) <= 0.03
