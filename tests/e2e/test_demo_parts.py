"""The demo's pure parts: the workload it derives from a table, and the report it prints."""

from __future__ import annotations

from typing import Any

import pytest
from prometheus_client import CollectorRegistry, Counter, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from demo.estimate import BATCHING, estimate
from demo.profiling import EVALSETS, REAL_SWEEP, SIM_SWEEP, sweep_tokens
from demo.replay import Outcome
from demo.report import (
    breakers_from_metrics,
    build_report,
    costs_from_metrics,
    quantile,
    refits_from_tables,
    render_report,
    report_json,
)
from demo.workload import (
    BUDGET_CLASSES,
    OPEN_SHARE,
    TIGHT_FACTOR,
    Job,
    build_jobs,
    load_items,
    predicted_latency_s,
    team_floors,
)
from profiler.run.profiling import load_eval_sets


def entry(pair: str, rank: int, accuracy: dict[str, float], tpot_s: float) -> dict[str, Any]:
    latency = {
        "ttft_base_s": 0.05,
        "ttft_per_input_token_s": 0.001,
        "ttft_per_load_s": 0.01,
        "tpot_base_s": tpot_s,
        "tpot_per_load_s": 0.0,
        "ttft_rmse_s": 0.0,
        "tpot_rmse_s": 0.0,
        "quantile": 0.95,
        "max_profiled_load": 8,
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
    "categories": ["chat", "math"],
    "entries": [
        entry("g@int4", 2, {"math": 0.4, "chat": 0.5}, 0.04),
        entry("g@int8", 1, {"math": 0.6, "chat": 0.7}, 0.05),
        entry("g@bf16", 0, {"math": 0.8123, "chat": 0.9}, 0.06),
    ],
}
# The lower bounds floors are compared with (docs/accuracy.md), below the point estimates.
BOUNDS = {"g@int4": {"math": 0.31, "chat": 0.42}, "g@int8": {"math": 0.517, "chat": 0.6},
          "g@bf16": {"math": 0.7345, "chat": 0.83}}  # fmt: skip
BOUNDED: dict[str, Any] = TABLE | {
    "entries": [e | {"accuracy_bound": BOUNDS[e["pair"]]} for e in TABLE["entries"]]
}


def test_team_floors_are_what_the_middle_of_the_fleet_proves() -> None:
    """Issue 22: the balanced floor was the median *point estimate*, which half the pairs can
    never prove with a lower bound; the policy's floor is now the median bound, rounded down,
    which the middle pair meets."""
    assert team_floors(BOUNDED) == {"chat": 0.6, "math": 0.51}
    assert team_floors(TABLE) == {"chat": 0.7, "math": 0.6}  # no bounds: the points
    for category, floor in team_floors(BOUNDED).items():
        assert sum(b[category] >= floor for b in BOUNDS.values()) >= 2


def test_jobs_derive_floors_and_budgets_from_the_table() -> None:
    jobs = build_jobs(load_items(EVALSETS), BOUNDED, count=40, loose_s=30.0, seed=1)
    assert [j.budget_class for j in jobs[:4]] == list(BUDGET_CLASSES)
    assert sum(j.stream for j in jobs) == 20
    assert sum(j.item is None for j in jobs) == 40 // OPEN_SHARE
    for job in jobs:
        headers = dict(job.headers)
        floor = headers.get("X-Min-Accuracy")
        if job.budget_class == "quality" and job.category == "math":
            assert floor == "0.734"  # the best lower bound, rounded down: g@bf16 proves it
        if job.budget_class == "cheap":
            assert floor == "0.000"
        if job.budget_class in ("balanced", "tight"):
            assert floor is None  # the policy's floor (`team_floors`) applies
        fastest = min(predicted_latency_s(e, job.prompt, job.max_tokens) for e in TABLE["entries"])
        expected_s = fastest * TIGHT_FACTOR if job.budget_class == "tight" else 30.0
        assert job.latency_budget_s == pytest.approx(expected_s, abs=1e-3)
        assert headers["X-Latency-Budget-Ms"] == f"{job.latency_budget_s * 1000:.0f}"


def test_jobs_are_the_same_for_the_same_seed() -> None:
    items = load_items(EVALSETS)
    assert build_jobs(items, TABLE, 12, 30.0, seed=5) == build_jobs(items, TABLE, 12, 30.0, seed=5)
    assert build_jobs(items, TABLE, 12, 30.0, seed=5) != build_jobs(items, TABLE, 12, 30.0, seed=6)


def outcome(
    job: Job,
    pair: str | None,
    latency_s: float,
    correct: bool | None,
    error: str | None = None,
    reason: str = "cheapest_feasible",
) -> Outcome:
    error = error if pair else "503: no healthy upstream"
    return Outcome(job, 200 if pair else 503, pair, reason if pair else None, latency_s, None,
                   "x", 5, 3, correct, error)  # fmt: skip


RELAXED = "best_effort_latency_relaxed; p_meet 0.40 (floor proven p 0.97, latency unproven p 0.41)"


def test_the_report_counts_share_attainment_accuracy_and_cost() -> None:
    jobs = build_jobs(load_items(EVALSETS), TABLE, count=6, loose_s=1.0, seed=1)
    cut = "stream ended early: the latency budget ran out mid-stream"
    outcomes = [
        outcome(jobs[5], "g@bf16", 0.3, None, error=cut),  # answered, cut short: budget missed
        outcome(jobs[0], "g@bf16", 0.5, True),  # met
        outcome(jobs[1], "g@int4", 2.0, False),  # missed (budget 1 s or tight)
        outcome(jobs[2], "g@int4", 0.2, True),
        outcome(jobs[3], "g@int4", 0.2, None, reason=RELAXED),  # served late, not refused
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
    # The reasons' suffixes (a best-effort chance) are dropped, so the counts stay few.
    assert report.reasons == {"cheapest_feasible": 4, "best_effort_latency_relaxed": 1}
    text = render_report(report)
    assert "route reasons: cheapest_feasible 4, best_effort_latency_relaxed 1" in text
    assert "saved 50%" in text
    assert "error: 503: no healthy upstream" in text
    assert text.endswith("breaker transitions per pair:\n  none\nrefits per pair:\n  none")
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
    assert len(replayed) == 206  # 40 generated a category, 6 code items with tests
    assert not profiled & replayed


def test_the_report_shows_breaker_transitions_and_refits_per_pair() -> None:
    """A regression like the real-engine one (a healthy pair's breaker opened, traffic moved
    to the dearest pair) shows in the demo's own output."""
    registry = CollectorRegistry()
    moved = Counter("gearbox_circuit_transitions", "t", ["endpoint", "to"], registry=registry)
    moved.labels(endpoint="g@int8#0", to="open").inc()
    moved.labels(endpoint="g@int8#1", to="open").inc()
    moved.labels(endpoint="g@int8#0", to="half_open").inc()
    moved.labels(endpoint="g@bf16#0", to="open")  # created, never moved
    text = generate_latest(registry).decode()
    breakers = breakers_from_metrics(text_string_to_metric_families(text))
    assert breakers == {"g@int8": {"open": 2, "half_open": 1}, "g@bf16": {"open": 0}}
    fit = {"samples": 290, "observed_e2e_ratio": 1.61, "ttft_factor": 1.36, "tpot_factor": 1.36}
    tables: list[dict[str, Any]] = [
        {"version": 2, "refit": None},
        {"version": 3, "refit": {"pairs": {"g@int4": fit}, "demoted": {"g@int8": {"chat": 0.5}}}},
    ]
    refits = refits_from_tables(tables)
    assert refits == {
        "g@int4": ["v3: TTFT x1.36, TPOT x1.36 (observed / predicted 1.61 over 290 samples)"],
        "g@int8": ["v3: accuracy demoted to chat 0.500"],
    }
    report = build_report("real", TABLE, [], {}, breakers=breakers, refits=refits)
    text = render_report(report)
    assert "  g@int8" + " " * 28 + " half_open 1, open 2" in text
    assert "g@bf16" not in text.split("breaker transitions per pair:")[1].split("refits")[0]
    assert "v3: accuracy demoted to chat 0.500" in text


def test_the_estimate_counts_the_profile_and_replay_tokens_at_the_smoke_speed() -> None:
    eval_tokens, load_tokens = sweep_tokens(REAL_SWEEP)
    assert eval_tokens == sum(i.max_tokens for i in load_eval_sets(EVALSETS)[0])
    # 2 concurrencies x 2 prompt lengths x (8 + 1 warm-up) requests x 16 tokens
    assert load_tokens == 2 * 2 * 9 * 16
    slow = estimate([2.0, 2.0], 1000, 200, 10)
    fast = estimate([4.0, 4.0], 1000, 200, 10)
    assert slow is not None
    assert fast is not None
    assert slow.profile_s == pytest.approx(2 * fast.profile_s)
    assert slow.profile_s == pytest.approx(2 * 1200 / (2.0 * BATCHING))
    assert slow.total_s == pytest.approx(slow.profile_s + slow.replay_s)
    assert "(2 pairs)" in slow.line(2)
    assert estimate([0.0], 1000, 200, 10) is None  # nothing measured: no guess
