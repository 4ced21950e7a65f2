"""Per-pair counters the live state reports (docs/operator_page.md, "What the page shows")."""

from __future__ import annotations

import pytest

from contracts.latency_feedback import ratio_bucket
from data_plane.decision.compile import compile_table
from data_plane.domain import Candidate
from data_plane.serving.usage import Usage
from data_plane.telemetry.pair_totals import PairTotals, predicted_e2e_s
from data_plane.telemetry.traffic import TrafficStats
from tests.unit.data_plane.tables import entry, table


def _candidate() -> Candidate:
    pair = compile_table(table([entry("m", "fp16", ttft_base_s=0.09, tpot_per_load_s=0.0)]))
    # the lines: TTFT 0.09 + 0.0001 per prompt token + 0.01 per load, TPOT 0.01 s
    return Candidate(pair.pairs[0], pair.pairs[0].endpoints, 10, 100, 0.1, 1.1, 0.0, 1.0)


def test_the_prediction_is_for_the_tokens_the_engine_counted() -> None:
    assert predicted_e2e_s(_candidate(), Usage(0, 100)) == pytest.approx(1.1)
    assert predicted_e2e_s(_candidate(), Usage(0, 20)) == pytest.approx(0.3)
    assert predicted_e2e_s(_candidate(), Usage(1000, 20)) == pytest.approx(0.4)


def test_answers_count_budget_and_latency() -> None:
    totals = PairTotals("m")
    totals.answered(0.6, 0.3, budget_s=1.0)
    totals.answered(1.5, 0.3, budget_s=1.0)
    totals.answered(0.3, 0.3, budget_s=None)
    snap = totals.snapshot()
    assert (snap.requests, snap.budget_met, snap.budget_missed) == (3, 1, 1)
    assert snap.latency_n == 3
    assert snap.latency_sum_s == pytest.approx(2.4)
    assert snap.predicted_sum_s == pytest.approx(0.9)
    assert snap.ratio_counts == {ratio_bucket(2.0): 1, ratio_bucket(5.0): 1, ratio_bucket(1.0): 1}


def test_an_answer_without_a_prediction_counts_but_not_its_latency() -> None:
    totals = PairTotals("m")
    totals.answered(0.5, 0.0, budget_s=None)
    snap = totals.snapshot()
    assert (snap.requests, snap.latency_n, snap.ratio_counts) == (1, 0, {})


def test_a_pair_without_a_baseline_saves_nothing() -> None:
    totals = PairTotals("m")
    totals.costed(0.2, baseline=None, fleet_baseline=0.5)
    totals.costed(0.1, baseline=0.3, fleet_baseline=None)
    snap = totals.snapshot()
    assert snap.cost_usd == pytest.approx(0.3)
    assert snap.baseline_cost_usd == pytest.approx(0.5)
    assert snap.fleet_baseline_cost_usd == pytest.approx(0.6)


def test_attempts_count_errors_and_retries_per_pair() -> None:
    traffic = TrafficStats()
    traffic.attempted("m@fp16", "m", retry=False, failed=True)
    traffic.attempted("m@fp16", "m", retry=True, failed=False)
    traffic.attempted("m@int4", "m", retry=True, failed=True)
    assert (traffic.pairs["m@fp16"].errors, traffic.pairs["m@fp16"].retries) == (1, 1)
    assert (traffic.pairs["m@int4"].errors, traffic.pairs["m@int4"].retries) == (1, 1)
    assert traffic.pairs["m@int4"].snapshot().family == "m"
