"""budget.py: every header, every bad value, case-insensitive names, ms -> seconds."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from multidict import CIMultiDict, CIMultiDictProxy

from contracts.budget_headers import (
    ACCURACY_HEADER,
    CATEGORY_HEADER,
    COST_HEADER,
    LATENCY_HEADER,
    MODE_HEADER,
    TTFT_HEADER,
)
from data_plane.domain import Budget, BudgetMode
from data_plane.errors import InvalidBudget
from data_plane.request.budget import _NUMBER, _plain, parse_budget


def test_no_headers_means_policy_defaults() -> None:
    assert parse_budget({}) == Budget()
    assert parse_budget({"Content-Type": "application/json", "X-Other": "1"}) == Budget()


def test_every_header_parsed() -> None:
    budget = parse_budget(
        {
            "X-Latency-Budget-Ms": "1500",
            "X-TTFT-Budget-Ms": "250.5",
            "X-Min-Accuracy": "0.8",
            "X-Max-Cost-Usd": "0.002",
            "X-Budget-Mode": "strict",
            "X-Task-Category": "code",
        }
    )
    assert budget == Budget(
        latency_s=1.5,
        ttft_s=0.2505,
        min_accuracy=0.8,
        max_cost_usd=0.002,
        mode=BudgetMode.STRICT,
        category="code",
    )


def test_names_are_case_insensitive_and_values_trimmed() -> None:
    budget = parse_budget(
        {
            "x-latency-budget-ms": " 2e3 ",
            "X-TTFT-BUDGET-MS": "+100",
            "x-min-accuracy": "1",
            "X-BUDGET-MODE": "Best-Effort",
            "x-task-category": "Math",
        }
    )
    assert budget.latency_s == 2.0
    assert budget.ttft_s == 0.1
    assert budget.min_accuracy == 1.0
    assert budget.mode is BudgetMode.BEST_EFFORT
    assert budget.category == "math"


def test_accuracy_bounds_are_inclusive() -> None:
    assert parse_budget({ACCURACY_HEADER: "0"}).min_accuracy == 0.0
    assert parse_budget({ACCURACY_HEADER: ".5"}).min_accuracy == 0.5


def test_repeated_header_with_same_value_is_fine() -> None:
    pairs = [("X-Min-Accuracy", "0.5"), ("x-min-accuracy", "0.5")]

    class Multi(dict[str, str]):
        def items(self) -> list[tuple[str, str]]:  # type: ignore[override]
            return pairs

    assert parse_budget(Multi()).min_accuracy == 0.5


def test_repeated_header_with_different_values_fails() -> None:
    pairs = [("X-Min-Accuracy", "0.5"), ("x-min-accuracy", "0.9")]

    class Multi(dict[str, str]):
        def items(self) -> list[tuple[str, str]]:  # type: ignore[override]
            return pairs

    with pytest.raises(InvalidBudget, match="more than once") as err:
        parse_budget(Multi())
    assert err.value.param == ACCURACY_HEADER


@pytest.mark.parametrize(
    ("header", "value", "words"),
    [
        (LATENCY_HEADER, "fast", "must be a number"),
        (LATENCY_HEADER, "", "must be a number"),
        (LATENCY_HEADER, "nan", "must be a number"),
        (LATENCY_HEADER, "inf", "must be a number"),
        (LATENCY_HEADER, "Infinity", "must be a number"),
        (LATENCY_HEADER, "1_000", "must be a number"),
        (LATENCY_HEADER, "0x10", "must be a number"),
        (LATENCY_HEADER, "1e999", "finite"),
        (LATENCY_HEADER, "1" * 80, "must be a number"),
        (LATENCY_HEADER, "0", "positive"),
        (LATENCY_HEADER, "-5", "positive"),
        (LATENCY_HEADER, "3600001", "one hour"),
        (LATENCY_HEADER, "1e9", "one hour"),
        (TTFT_HEADER, "abc", "must be a number"),
        (TTFT_HEADER, "0.0", "positive"),
        (TTFT_HEADER, "86400000", "one hour"),
        (ACCURACY_HEADER, "high", "must be a number"),
        (ACCURACY_HEADER, "95", "between 0 and 1"),
        (ACCURACY_HEADER, "-0.1", "between 0 and 1"),
        (ACCURACY_HEADER, "1.0001", "between 0 and 1"),
        (ACCURACY_HEADER, "NaN", "must be a number"),
        (COST_HEADER, "$0.01", "must be a number"),
        (COST_HEADER, "0", "positive"),
        (COST_HEADER, "-1", "positive"),
        (COST_HEADER, "5000", "at most"),
        (MODE_HEADER, "lenient", "best-effort, strict"),
        (MODE_HEADER, "", "best-effort, strict"),
        (MODE_HEADER, "best_effort", "best-effort, strict"),
        (CATEGORY_HEADER, "", "category name"),
        (CATEGORY_HEADER, "code review", "category name"),
        (CATEGORY_HEADER, "9code", "category name"),
        (CATEGORY_HEADER, "c" * 41, "category name"),
        (CATEGORY_HEADER, "code;drop", "category name"),
    ],
)
def test_bad_values_name_the_header(header: str, value: str, words: str) -> None:
    with pytest.raises(InvalidBudget, match=words) as err:
        parse_budget({header: value})
    assert err.value.param == header
    assert header in err.value.message
    assert err.value.status == 400


def test_long_bad_values_are_shortened_in_messages() -> None:
    with pytest.raises(InvalidBudget) as err:
        parse_budget({MODE_HEADER: "x" * 500})
    assert len(err.value.message) < 200


@given(st.floats(min_value=0.001, max_value=3_600_000, allow_nan=False))
def test_any_valid_duration_round_trips(ms: float) -> None:
    budget = parse_budget({LATENCY_HEADER: repr(ms)})
    assert budget.latency_s == pytest.approx(ms / 1000)


@given(st.text(max_size=30))
def test_arbitrary_text_is_either_parsed_or_rejected_cleanly(value: str) -> None:
    for header in (LATENCY_HEADER, ACCURACY_HEADER, COST_HEADER, MODE_HEADER, CATEGORY_HEADER):
        params = []
        try:
            parse_budget({header: value})
        except InvalidBudget as err:
            params.append(err.param)
        assert params in ([], [header])


def test_multidict_headers_are_read_by_name() -> None:
    headers = CIMultiDictProxy(
        CIMultiDict(
            [
                ("Host", "x"),
                ("x-latency-budget-ms", " 1500 "),
                ("X-Min-Accuracy", "0.5"),
                ("x-min-accuracy", "0.5"),
            ]
        )
    )
    budget = parse_budget(headers)
    assert (budget.latency_s, budget.min_accuracy, budget.mode) == (1.5, 0.5, None)
    clash = CIMultiDict([("X-Budget-Mode", "strict"), ("x-budget-mode", "best-effort")])
    with pytest.raises(InvalidBudget, match="more than once") as err:
        parse_budget(clash)
    assert err.value.param == MODE_HEADER
    assert parse_budget(CIMultiDict([("Host", "x")])) == Budget()


_NUMBERISH = st.text(alphabet="0123456789.+-eE \u0660\u00b2x", max_size=12)


@given(st.one_of(_NUMBERISH, st.text(max_size=12)))
def test_the_plain_number_shortcut_accepts_only_what_the_pattern_accepts(value: str) -> None:
    """`_plain` skips the regex for the usual values; it must never accept more than it."""
    if _plain(value):
        assert _NUMBER.fullmatch(value)


@pytest.mark.parametrize("value", ["20000", "0.5", "5.", "0007", "1.25"])
def test_the_usual_values_take_the_shortcut(value: str) -> None:
    assert _plain(value)
    assert parse_budget({ACCURACY_HEADER: "0.5", LATENCY_HEADER: value}).latency_s == (
        float(value) / 1000
    )


@pytest.mark.parametrize("value", [".5", "1e3", "+1", "1.2.3", "\u0661\u0662", "\u00b2", "", "."])
def test_other_values_are_judged_by_the_pattern(value: str) -> None:
    assert not _plain(value)
