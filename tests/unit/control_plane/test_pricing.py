"""Prices: explicit ones pass through; derived ones follow the documented formula."""

from __future__ import annotations

import pytest

from contracts.profile_report import ProfileReport
from control_plane.build.pricing import DERIVED_INPUT_PRICE_RATIO, price_pair
from tests.unit.control_plane.factories import make_report, report_data, sample


def test_explicit_prices_are_used_as_given() -> None:
    report = make_report(prices=(0.1, 0.4), hourly_usd=None)
    prices = price_pair(report)
    assert (prices.input_usd_per_mtok, prices.output_usd_per_mtok) == (0.1, 0.4)
    assert prices.source == "explicit"
    assert prices.sustained_output_tokens_per_s == pytest.approx(
        max(s.output_tokens_per_s for s in report.latency), rel=1e-8
    )


def test_explicit_prices_win_over_hourly_cost() -> None:
    prices = price_pair(make_report(prices=(0.1, 0.4), hourly_usd=100.0))
    assert prices.output_usd_per_mtok == 0.4


def test_derived_prices_follow_the_formula() -> None:
    data = report_data(hourly_usd=3.6)
    data["latency"] = [
        sample(1, 512, (0.02, 0, 0), (0.01, 0), throughput=100.0),
        sample(8, 512, (0.02, 0, 0), (0.01, 0), throughput=1000.0),
    ]
    prices = price_pair(ProfileReport.model_validate(data))
    # 3.6 USD/h = 0.001 USD/s over 1000 tokens/s = 1e-6 USD per token = 1 USD per Mtok.
    assert prices.source == "derived"
    assert prices.output_usd_per_mtok == pytest.approx(1.0)
    assert prices.input_usd_per_mtok == pytest.approx(DERIVED_INPUT_PRICE_RATIO)
    assert prices.sustained_output_tokens_per_s == 1000.0


def test_overloaded_levels_do_not_count_as_sustained() -> None:
    data = report_data(hourly_usd=3.6)
    overloaded = sample(64, 512, (0.02, 0, 0), (0.01, 0), throughput=5000.0, errors=50)
    data["latency"] = [sample(8, 512, (0.02, 0, 0), (0.01, 0), throughput=1000.0), overloaded]
    prices = price_pair(ProfileReport.model_validate(data))
    assert prices.sustained_output_tokens_per_s == 1000.0


def test_all_levels_overloaded_falls_back_to_every_level() -> None:
    data = report_data(hourly_usd=3.6)
    data["latency"] = [sample(8, 512, (0.02, 0, 0), (0.01, 0), throughput=2000.0, errors=50)]
    assert price_pair(ProfileReport.model_validate(data)).output_usd_per_mtok == pytest.approx(0.5)


def test_free_hardware_prices_zero() -> None:
    prices = price_pair(make_report(hourly_usd=0.0))
    assert prices.input_usd_per_mtok == 0.0
    assert prices.output_usd_per_mtok == 0.0
