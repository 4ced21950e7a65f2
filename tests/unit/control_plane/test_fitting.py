"""Latency fits: known synthetic curves are recovered; coefficients never go negative."""

from __future__ import annotations

import math

import pytest

from contracts.profile_report import LatencySample
from control_plane.fitting import fit_latency_model, fit_nonnegative, round_sig
from tests.unit.control_plane.factories import QUANTILE_FACTOR, make_report, sample


@pytest.mark.parametrize(("quantile", "factor_key"), [(0.5, "p50"), (0.95, "p95"), (0.99, "p99")])
def test_fit_recovers_known_curves_at_the_quantile(quantile: float, factor_key: str) -> None:
    report = make_report(ttft=(0.03, 4e-5, 0.005), tpot=(0.007, 0.00015))
    model = fit_latency_model(report.latency, quantile)
    k = QUANTILE_FACTOR[factor_key]
    assert model.quantile == quantile
    assert model.ttft_base_s == pytest.approx(0.03 * k, rel=1e-6)
    assert model.ttft_per_input_token_s == pytest.approx(4e-5 * k, rel=1e-6)
    assert model.ttft_per_load_s == pytest.approx(0.005 * k, rel=1e-6)
    assert model.tpot_base_s == pytest.approx(0.007 * k, rel=1e-6)
    assert model.tpot_per_load_s == pytest.approx(0.00015 * k, rel=1e-6)
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
    assert model.ttft_base_s == pytest.approx(0.02 + 3e-5 * 1000, rel=1e-6)
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
