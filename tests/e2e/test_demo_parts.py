"""The demo's pure parts: the workload it derives from a table, and the report it prints."""

from __future__ import annotations

from typing import Any

import pytest
from prometheus_client import CollectorRegistry, Counter, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from demo.profiling import EVALSETS, REAL_SWEEP, SIM_SWEEP
from demo.replay import Outcome
from demo.report import build_report, costs_from_metrics, quantile, render_report, report_json
from demo.workload import (
    BUDGET_CLASSES,
    OPEN_SHARE,
    TIGHT_FACTOR,
    Job,
    build_jobs,
    load_items,
    predicted_latency_s,
)


def entry(pair: str, rank: int, accuracy: dict[str, float], tpot_s: float) -> dict[str, Any]:
    latency = {
        "ttft_base_s": 0.05,
        "ttft_per_input_token_s": 0.001,
        "ttft_per_load_s": 0.01,
        "tpot_base_s": tpot_s,
        "tpot_per_load_s": 0.0,
    }
    return {
        "pair": pair,
        "precision_rank": rank,
        "accuracy": accuracy,
        "chars_per_token": 4.0,
        "latency": latency,
    }


TABLE: dict[str, Any] = {
    "version": 3,
    "entries": [
        entry("g@int4", 2, {"math": 0.4, "chat": 0.5}, 0.04),
        entry("g@int8", 1, {"math": 0.6, "chat": 0.7}, 0.05),
        entry("g@bf16", 0, {"math": 0.8123, "chat": 0.9}, 0.06),
    ],
}


def test_jobs_derive_floors_and_budgets_from_the_table() -> None:
    jobs = build_jobs(load_items(EVALSETS), TABLE, count=40, loose_s=30.0, seed=1)
    assert [j.budget_class for j in jobs[:4]] == list(BUDGET_CLASSES)
    assert sum(j.stream for j in jobs) == 20
    assert sum(j.item is None for j in jobs) == 40 // OPEN_SHARE
    for job in jobs:
        headers = dict(job.headers)
        floor = headers.get("X-Min-Accuracy")
        if job.budget_class == "quality" and job.category == "math":
            assert floor == "0.812"  # the best measured accuracy, rounded down
        if job.budget_class == "balanced" and job.category == "math":
            assert floor == "0.600"  # the median
        if job.budget_class in ("cheap", "tight"):
            assert floor is None
        fastest = min(predicted_latency_s(e, job.prompt, job.max_tokens) for e in TABLE["entries"])
        expected_s = fastest * TIGHT_FACTOR if job.budget_class == "tight" else 30.0
        assert job.latency_budget_s == pytest.approx(expected_s, abs=1e-3)
        assert headers["X-Latency-Budget-Ms"] == f"{job.latency_budget_s * 1000:.0f}"


def test_jobs_are_the_same_for_the_same_seed() -> None:
    items = load_items(EVALSETS)
    assert build_jobs(items, TABLE, 12, 30.0, seed=5) == build_jobs(items, TABLE, 12, 30.0, seed=5)
    assert build_jobs(items, TABLE, 12, 30.0, seed=5) != build_jobs(items, TABLE, 12, 30.0, seed=6)


def outcome(
    job: Job, pair: str | None, latency_s: float, correct: bool | None, error: str | None = None
) -> Outcome:
    error = error if pair else "503: no healthy upstream"
    return Outcome(job, 200 if pair else 503, pair, "cheapest", latency_s, None, "x", 5, 3,
                   correct, error)  # fmt: skip


def test_the_report_counts_share_attainment_accuracy_and_cost() -> None:
    jobs = build_jobs(load_items(EVALSETS), TABLE, count=6, loose_s=1.0, seed=1)
    cut = "stream ended early: the latency budget ran out mid-stream"
    outcomes = [
        outcome(jobs[5], "g@bf16", 0.3, None, error=cut),  # answered, cut short: budget missed
        outcome(jobs[0], "g@bf16", 0.5, True),  # met
        outcome(jobs[1], "g@int4", 2.0, False),  # missed (budget 1 s or tight)
        outcome(jobs[2], "g@int4", 0.2, True),
        outcome(jobs[3], "g@int4", 0.2, None),
        outcome(jobs[4], None, 0.1, None),  # an error: not in any pair's share
    ]
    costs = {"g@bf16": (0.004, 0.004), "g@int4": (0.001, 0.006)}
    report = build_report("sim", TABLE, outcomes, costs)
    rows = {r.pair: r for r in report.rows}
    assert [r.pair for r in report.rows] == ["g@int4", "g@int8", "g@bf16"]
    assert rows["g@int4"].requests == 3
    assert rows["g@int4"].share == pytest.approx(0.6)
    assert rows["g@int4"].known_answers == 2
    assert rows["g@int4"].accuracy == pytest.approx(0.5)
    assert rows["g@int8"].requests == 0
    assert rows["g@int8"].attainment is None
    assert rows["g@bf16"].requests == 2
    assert rows["g@bf16"].attainment == pytest.approx(0.5)
    assert rows["g@bf16"].known_answers == 1
    assert report.errors == 2
    assert report.cost_usd == pytest.approx(0.005)
    assert report.baseline_cost_usd == pytest.approx(0.010)
    assert report.saved_ratio == pytest.approx(0.5)
    assert report.most_precise == ("g@bf16",)
    text = render_report(report)
    assert "saved 50%" in text
    assert "error: 503: no healthy upstream" in text
    data = report_json(report)
    assert data["rows"][0]["accuracy"] == pytest.approx(0.5)
    assert data["saved_ratio"] == pytest.approx(0.5)


def test_costs_come_from_the_data_plane_counters() -> None:
    registry = CollectorRegistry()
    cost = Counter("gearbox_cost_usd", "cost", ["pair"], registry=registry)
    baseline = Counter("gearbox_baseline_cost_usd", "baseline", ["pair"], registry=registry)
    tokens = Counter("gearbox_tokens", "tokens", ["pair", "kind"], registry=registry)
    cost.labels(pair="g@int4").inc(0.25)
    baseline.labels(pair="g@int4").inc(1.0)
    tokens.labels(pair="g@int4", kind="input").inc(99)
    text = generate_latest(registry).decode()
    assert costs_from_metrics(text_string_to_metric_families(text)) == {"g@int4": (0.25, 1.0)}


@pytest.mark.parametrize(
    ("values", "q", "expected"),
    [([], 0.5, 0.0), ([3.0], 0.95, 3.0), ([1.0, 2.0, 3.0, 4.0], 0.5, 2.5), ([1.0, 5.0], 1.0, 5.0)],
)
def test_quantile(values: list[float], q: float, expected: float) -> None:
    assert quantile(values, q) == pytest.approx(expected)


@pytest.mark.parametrize("sweep", [REAL_SWEEP, SIM_SWEEP])
def test_demo_sweeps_measure_more_than_one_prompt_length(sweep: Any) -> None:
    # With one prompt length the fit cannot see TTFT per input token and sets it to 0.
    assert len(set(sweep.input_tokens.split(","))) >= 2


def test_the_demo_scores_on_items_it_did_not_profile() -> None:
    from demo.profiling import HOLDOUT, SIM_SWEEP

    profiled = {i.prompt for i in load_items(SIM_SWEEP.evalsets)}
    replayed = {i.prompt for i in load_items(HOLDOUT)}
    assert len(replayed) == 200
    assert not profiled & replayed
