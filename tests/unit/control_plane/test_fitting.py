"""Latency fits: known synthetic curves are recovered; coefficients never go negative."""

from __future__ import annotations

import math
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from contracts.policy import Policy
from contracts.profile_report import LatencySample, ProfileReport
from control_plane.build.fitting import fit_latency_model, fit_nonnegative, round_sig
from control_plane.build.table import build_table
from data_plane.decision.compile import compile_table
from data_plane.decision.feasibility import predict
from tests.unit.control_plane.factories import QUANTILE_FACTOR, make_report, report_data, sample


@pytest.mark.parametrize(("quantile", "factor_key"), [(0.5, "p50"), (0.95, "p95"), (0.99, "p99")])
def test_fit_recovers_known_curves_at_the_quantile(quantile: float, factor_key: str) -> None:
    report = make_report(ttft=(0.03, 4e-5, 0.005), tpot=(0.007, 0.00015))
    model = fit_latency_model(report.latency, quantile)
    k = QUANTILE_FACTOR[factor_key]
    assert model.quantile == quantile
    assert model.ttft_per_input_token_s == pytest.approx(4e-5 * k, rel=1e-6)
    assert model.ttft_per_load_s == pytest.approx(0.005 * k, rel=1e-6)  # beyond the levels
    assert model.tpot_per_load_s == pytest.approx(0.00015 * k, rel=1e-6)
    for load in (1, 2, 4, 9, 16, 20):  # at, between and beyond the profiled levels
        ttft = (0.03 + 4e-5 * 700 + 0.005 * load) * k
        assert model.ttft_s(700, load) == pytest.approx(ttft, rel=1e-6)
        assert model.tpot_s(load) == pytest.approx((0.007 + 0.00015 * load) * k, rel=1e-6)
    assert model.ttft_rmse_s < 1e-9
    assert model.tpot_rmse_s < 1e-9
    assert model.max_profiled_load == 16


def test_fit_clips_a_decreasing_trend_to_zero() -> None:
    # TPOT that *falls* with load (noise, warm-up): the model must not predict speed-ups.
    samples = [
        LatencySample.model_validate(sample(c, 512, (0.02, 1e-5, 0.003), (0.010 - 0.001 * c, 0.0)))
        for c in (1, 2, 4)
    ]
    model = fit_latency_model(samples, 0.5)
    assert model.tpot_per_load_s == 0.0
    assert model.tpot_base_s > 0.0
    assert model.tpot_rmse_s > 0.0  # a straight non-increasing line cannot fit exactly


def test_constant_columns_fold_into_the_intercept() -> None:
    # One prompt length only: the per-token slope is unidentifiable and stays 0.
    report = make_report(inputs=(1000,), ttft=(0.02, 3e-5, 0.004))
    model = fit_latency_model(report.latency, 0.5)
    assert model.ttft_per_input_token_s == 0.0
    assert model.ttft_s(1000, 4) == pytest.approx(0.02 + 3e-5 * 1000 + 0.004 * 4, rel=1e-6)
    assert model.ttft_per_load_s == pytest.approx(0.004, rel=1e-6)


def test_single_sample_is_a_flat_model() -> None:
    report = make_report(loads=(8,), inputs=(512,))
    model = fit_latency_model(report.latency, 0.95)
    assert model.ttft_per_load_s == 0.0
    assert model.tpot_per_load_s == 0.0
    assert model.ttft_s(512, 8) == pytest.approx(report.latency[0].ttft_s.p95, rel=1e-6)
    assert model.max_profiled_load == 8


def test_fit_does_not_depend_on_sample_order() -> None:
    report = make_report(ttft=(0.021, 3.3e-5, 0.0041), tpot=(0.0061, 0.00012))
    forward = fit_latency_model(report.latency, 0.95)
    backward = fit_latency_model(tuple(reversed(report.latency)), 0.95)
    assert forward == backward


def test_fit_rejects_no_samples() -> None:
    with pytest.raises(ValueError, match="at least one"):
        fit_latency_model((), 0.95)


def test_fit_nonnegative_least_squares() -> None:
    # y = 2 + 3x exactly; and a column with a negative true slope is clipped at 0.
    coef = fit_nonnegative([[1, 1, 1], [0, 1, 2]], [2, 5, 8])
    assert coef == pytest.approx([2.0, 3.0])
    clipped = fit_nonnegative([[1, 1, 1], [0, 1, 2]], [8, 5, 2])
    assert clipped[1] == 0.0
    assert clipped[0] == pytest.approx(5.0)


@pytest.mark.parametrize(
    ("value", "expected"),
    [(0.0, 0.0), (-0.0, 0.0), (1.23456789012, 1.23456789), (math.inf, math.inf)],
)
def test_round_sig(value: float, expected: float) -> None:
    assert round_sig(value) == expected
    assert math.copysign(1.0, round_sig(value)) == math.copysign(1.0, expected)


def test_the_log_spread_is_read_from_p50_and_p95() -> None:
    # factories scale every quantile from the same curve: p95 / p50 is the same at each level
    report = make_report(ttft=(0.03, 4e-5, 0.005), tpot=(0.007, 0.00015))
    model = fit_latency_model(report.latency, 0.95)
    expected = math.log(QUANTILE_FACTOR["p95"] / QUANTILE_FACTOR["p50"]) / 1.6448536269514722
    assert model.ttft_log_spread == pytest.approx(expected, rel=1e-6)
    assert model.tpot_log_spread == pytest.approx(expected, rel=1e-6)
    # the spread does not depend on the table's quantile: it describes the requests
    assert fit_latency_model(report.latency, 0.5).tpot_log_spread == model.tpot_log_spread


def _queueing_report() -> dict[str, Any]:
    """A profile like the simulated fleet's (bench/quality/fleet.py): TTFT about 9-13 ms up to
    the batch size (16), then a request waits for a slot, ~150 ms at 24 and 32 streams; TPOT
    grows with the batch, then stays. 40 requests per level; p90 / p99 at 0.93 / 1.1 x p95."""
    data = report_data(loads=(1, 4, 8, 16, 24, 32), inputs=(64, 256))
    for s in data["latency"]:
        load, n_in = s["concurrency"], s["input_tokens"]
        ttft = 0.008 + 2e-5 * n_in + (0.15 if load > 16 else 0.0)
        tpot = 0.003 + 0.0001 * (min(load, 16) - 1)
        for key, value in (("ttft_s", ttft), ("tpot_s", tpot)):
            s[key] = {"n": 40, "mean": value * 0.8, "p50": value * 0.8, "p90": value * 0.93,
                      "p95": value, "p99": value * 1.1}  # fmt: skip
        s["e2e_s"] = {"n": 40, "mean": 1.0, "p50": 1.0, "p90": 1.0, "p95": 1.0, "p99": 1.0}
    return data


@pytest.mark.parametrize("profile", ["examples", "queueing"])
def test_predicted_p95_at_every_profiled_level_is_within_the_measured_p95s_noise(
    profile: str,
) -> None:
    """Issue 22: the error added to a prediction is the error at the load being predicted. The
    measured p95 of n requests is known to within its order statistics; for n >= 40 a
    one-sided 95% interval of rank 0.95 n lies within [p90, p99] of the level, so the
    prediction the data plane makes (compiled, widened) must land there at every level."""
    if profile == "examples":
        paths = sorted(Path(__file__).parents[3].joinpath("examples", "profiles").glob("*.json"))
        reports = [ProfileReport.model_validate_json(p.read_bytes()) for p in paths]
    else:
        reports = [ProfileReport.model_validate(_queueing_report())]
    table = build_table(reports, Policy(), datetime(2026, 1, 1, tzinfo=UTC))
    compiled = {p.pair: p for p in compile_table(table).pairs}
    checked = 0
    for report in reports:
        pair = compiled.get(f"{report.family}@{report.quantization}")
        if pair is None:  # pruned
            continue
        for s in report.latency:
            chars = int(s.input_tokens * pair.chars_per_token)  # = input_tokens on the pair
            at = {pair.endpoints[0].id: s.concurrency - 1.0}  # + this request = the level
            made = predict(pair, pair.endpoints, chars, 100, at)
            ttft = made.predicted_ttft_s
            tpot = (made.predicted_latency_s - ttft) / 100
            where = f"{pair.pair} at load {s.concurrency}, {s.input_tokens} tokens in"
            assert s.ttft_s.p90 <= ttft <= s.ttft_s.p99, f"TTFT {ttft:.4f} s {where}: {s.ttft_s}"
            assert s.tpot_s.p90 <= tpot <= s.tpot_s.p99, f"TPOT {tpot:.5f} s {where}: {s.tpot_s}"
            checked += 1
    assert checked >= 12
