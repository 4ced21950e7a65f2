"""Latency feedback on the data plane: ratios per pair and load bucket, drained per window."""

from __future__ import annotations

import pytest

from contracts.latency_feedback import (
    RATIO_BUCKETS,
    RatioHistogram,
    bucket_ratio,
    load_bucket,
    merge_histograms,
    ratio_bucket,
)
from data_plane.decision.compile import compile_table
from data_plane.domain import Candidate, RouteDecision, RouteReason
from data_plane.telemetry.feedback import FeedbackAggregator
from tests.unit.data_plane.tables import entry, table


def _candidate(load: float = 1.0, per_input_token_s: float = 0.0) -> Candidate:
    flat = entry(
        "m",
        "fp16",
        ttft_base_s=0.1,
        ttft_per_input_token_s=per_input_token_s,
        ttft_per_load_s=0.0,
        tpot_base_s=0.01,
        tpot_per_load_s=0.0,
    )
    pair = compile_table(table([flat])).pairs[0]
    # predicted: TTFT 0.1 s (+ per_input_token_s per prompt token), TPOT 0.01 s
    return Candidate(pair, pair.endpoints, 10, 100, 0.1, 1.1, 0.0, load)


@pytest.mark.parametrize("ratio", [0.07, 0.5, 1.0, 1.3, 3.0, 40.0])
def test_a_ratio_reads_back_within_its_bucket(ratio: float) -> None:
    assert bucket_ratio(ratio_bucket(ratio)) == pytest.approx(ratio, rel=0.05)


def test_ratios_out_of_range_land_in_the_end_buckets() -> None:
    assert ratio_bucket(0.0) == 0
    assert ratio_bucket(1e-9) == 0
    assert ratio_bucket(1e9) == RATIO_BUCKETS - 1
    assert ratio_bucket(float("inf")) == RATIO_BUCKETS - 1


def test_load_buckets_double() -> None:
    assert [load_bucket(x) for x in (1, 1.5, 2, 3, 4, 7, 8, 63, 64, 1000)] == [
        0, 0, 1, 1, 2, 2, 3, 5, 6, 6,
    ]  # fmt: skip


def test_histogram_quantile_and_merge() -> None:
    ones = RatioHistogram(counts={ratio_bucket(1.0): 90})
    slow = RatioHistogram(counts={ratio_bucket(3.0): 10})
    merged = merge_histograms([ones, slow])
    assert merged.n == 100
    assert merged.quantile(0.5) == pytest.approx(1.0, rel=0.05)
    assert merged.quantile(0.95) == pytest.approx(3.0, rel=0.05)
    assert RatioHistogram().quantile(0.95) is None


def test_observations_become_ratios_per_pair_and_load_bucket() -> None:
    agg = FeedbackAggregator(now=100.0)
    c = _candidate(load=5)
    # Streamed, 21 tokens: prediction for them = 0.1 + 21 x 0.01 = 0.31 s; observed 0.62 s,
    # first token after 0.3 s (3x), then 0.32 s / 20 = 0.016 s per token (1.6x).
    agg.observe(7, c, (0.62, 0.3), (10, 21))
    agg.observe(7, _candidate(load=1), (1.1, None), (10, 100))  # not streamed: e2e only, ratio 1
    agg.observe(8, c, (0.31, None), (10, 21))
    first = agg.drain("dp-a", now=110.0)
    assert [(r.table_version, r.instance) for r in first] == [(7, "dp-a"), (8, "dp-a")]
    v7 = {cell.load_bucket: cell for cell in first[0].cells}
    assert set(v7) == {0, 2}
    assert {c.size_bucket for c in first[0].cells} == {0, 1}  # 31 and 110 tokens
    assert v7[2].e2e.quantile(0.5) == pytest.approx(2.0, rel=0.05)
    assert v7[2].ttft.quantile(0.5) == pytest.approx(3.0, rel=0.05)
    assert v7[2].tpot.quantile(0.5) == pytest.approx(1.6, rel=0.05)
    assert (v7[0].e2e.n, v7[0].ttft.n, v7[0].tpot.n) == (1, 0, 0)
    assert first[0].window_start.timestamp() == 100.0
    assert first[0].window_end.timestamp() == 110.0
    assert agg.drain("dp-a", now=120.0) == []  # a new window, nothing observed


def test_a_report_stays_small_whatever_the_traffic() -> None:
    agg = FeedbackAggregator(now=0.0)
    c = _candidate()
    for i in range(20_000):
        agg.observe(1, c, (1.1 * (1 + (i % 7) / 10), 0.1), (10, 100))
    (report,) = agg.drain("dp", now=1.0)
    assert report.cells[0].e2e.n == 20_000
    assert len(report.model_dump_json()) < 1_000


def test_feedback_and_refit_checks_are_on_by_default() -> None:
    from control_plane.settings import ControlPlaneSettings
    from data_plane.settings import DataPlaneSettings
    from data_plane.sync.feedback_writer import STREAM_MAXLEN

    assert DataPlaneSettings().feedback.interval_s == 10.0
    assert ControlPlaneSettings().refit_check_interval_s == 30.0
    assert STREAM_MAXLEN == 10_000


def _decision(reason: RouteReason, floor: float, cost: float) -> RouteDecision:
    pair = compile_table(table([entry("m", "fp16")])).pairs[0]
    first = Candidate(pair, pair.endpoints, 30, 100, 0.1, 1.1, cost)
    return RouteDecision([first], reason, "chat", 0.5, None, None, floor)


def test_decisions_become_the_recent_mix_per_category_floor_and_pair() -> None:
    """The mix `contracts.evidence` reads: counted at the decision, drained with the window."""
    agg = FeedbackAggregator(now=100.0)
    agg.observe_decision(3, _decision(RouteReason.CHEAPEST_FEASIBLE, 0.851, 0.002))
    agg.observe_decision(3, _decision(RouteReason.FLOOR_RELAXED, 0.85, 0.001))
    agg.observe_decision(3, _decision(RouteReason.CHEAPEST_FEASIBLE, 0.9, 0.002))
    (report,) = agg.drain("dp", now=160.0)
    assert report.cells == ()  # nothing answered yet: the mix alone makes a report
    low, high = report.mix
    assert (low.category, low.floor, low.pair) == ("chat", 0.85, "m@fp16")
    assert (low.requests, low.proven, low.input_tokens, low.output_tokens) == (2, 1, 60, 200)
    assert low.cost_usd == pytest.approx(0.003)
    assert (high.floor, high.requests, high.proven) == (0.9, 1, 1)
    assert agg.drain("dp", now=200.0) == []


def test_the_prediction_is_for_the_tokens_the_engine_reported() -> None:
    """A prompt whose images and tools the request's characters missed: the engine's usage
    says 2,000 prompt tokens, so its slower first token is what the table predicts."""
    agg = FeedbackAggregator(now=0.0)
    c = _candidate(per_input_token_s=0.0001)  # TTFT for 2,000 tokens: 0.1 + 0.2 = 0.3 s
    agg.observe(1, c, (0.3 + 10 * 0.01, 0.3), (2000, 11), budget_met=True)
    agg.observe(1, c, (0.8, 0.3), (2000, 11), budget_met=False)
    (report,) = agg.drain("dp", now=1.0)
    (cell,) = report.cells
    assert cell.ttft.quantile(0.5) == pytest.approx(1.0, rel=0.05)
    assert cell.e2e.quantile(0.01) == pytest.approx(1.0, rel=0.05)
    assert (cell.budget_met, cell.budget_missed) == (1, 1)


def test_no_one_client_supplies_more_than_its_share_of_a_pairs_samples() -> None:
    agg = FeedbackAggregator(now=0.0)
    c = _candidate()
    for i in range(400):
        agg.observe(1, c, (1.1, None), (10, 100), client=(f"k:{i % 8}", 0.25))  # 8 alike
    for _ in range(400):
        agg.observe(1, c, (9.9, None), (10, 100), client=("t:noisy", 0.25))
    (report,) = agg.drain("dp", now=1.0)
    e2e = report.cells[0].e2e
    slow = sum(n for b, n in e2e.counts.items() if b > ratio_bucket(2.0))
    assert slow <= 0.25 * e2e.n + 1
    assert e2e.n - slow == 400  # the eight ordinary clients are all counted
    assert agg.capped == 400 - slow
    for _ in range(50):  # requests that name no client are not capped
        agg.observe(1, c, (1.1, None), (10, 100), client=(None, 0.25))
    (report,) = agg.drain("dp", now=2.0)
    assert report.cells[0].e2e.n == 50


def test_canary_items_are_counted_per_table_pair_and_category() -> None:
    """Scored canary items reach the control plane in the window's report about their table
    (docs/accuracy.md "Canary items"); agreement stays a separate count."""
    agg = FeedbackAggregator(now=0.0)
    for right in (True, True, False):
        agg.observe_canary(3, "fam@int4", "math", right)
    agg.observe_canary(4, "fam@int4", "math", True)
    agg.observe_agreement(3, "fam@int4", "math", False)
    reports = {r.table_version: r for r in agg.drain("dp", now=1.0)}
    assert [(c.pair, c.category, c.n, c.right) for c in reports[3].canary] == [
        ("fam@int4", "math", 3, 2)
    ]
    assert [(c.n, c.right) for c in reports[4].canary] == [(1, 1)]
    assert [(c.checks, c.agreed) for c in reports[3].agreement] == [(1, 0)]
    assert agg.drain("dp", now=2.0) == []
