"""scoring: every scorer against completion-style answers."""

from __future__ import annotations

from typing import Any

import pytest

from contracts.answer_scoring import Scorer, first_json_object, first_number, score


@pytest.mark.parametrize(
    ("answer", "expected", "scorer", "tolerance", "right"),
    [
        (" Paris.\nIt is big.", "Paris", Scorer.EXACT, 0.0, True),
        ("\n\n  Paris  ", "Paris", Scorer.EXACT, 0.0, True),
        (" paris", "Paris", Scorer.EXACT, 0.0, False),
        (" Paris, France", "Paris", Scorer.EXACT, 0.0, False),
        (" Paris. It is the capital", "paris", Scorer.CONTAINS, 0.0, True),
        (" a + b\n", "+ b", Scorer.CONTAINS, 0.0, True),
        (" a - b", "+ b", Scorer.CONTAINS, 0.0, False),
        (" x * x", r"\*\s*x|\*\*\s*2", Scorer.REGEX, 0.0, True),
        (" x ** 2", r"\*\s*x|\*\*\s*2", Scorer.REGEX, 0.0, True),
        (" x + 2", r"\*\s*x|\*\*\s*2", Scorer.REGEX, 0.0, False),
        (" 19\n12 + 8 = 20", 19, Scorer.NUMERIC, 0.0, True),
        (" 20", 19, Scorer.NUMERIC, 0.0, False),
        (" 3.004 apples", 3, Scorer.NUMERIC, 0.01, True),
        (" 3.2", 3, Scorer.NUMERIC, 0.01, False),
        (" -7 degrees", -7, Scorer.NUMERIC, 0.0, True),
        (" 1,001 people", 1001, Scorer.NUMERIC, 0.0, True),
        (" no idea", 19, Scorer.NUMERIC, 0.0, False),
        (
            ' {"name": "Alice", "age": 30}\nText: ...',
            {"name": "Alice", "age": 30},
            Scorer.JSON,
            0,
            True,
        ),
        (
            ' {"age": 30.0, "name": "Alice", "x": 1}',
            {"name": "Alice", "age": 30},
            Scorer.JSON,
            0,
            True,
        ),
        (' {"name": "Alice", "age": 31}', {"name": "Alice", "age": 30}, Scorer.JSON, 0.0, False),
        (' {"name": "Alice"}', {"name": "Alice", "age": 30}, Scorer.JSON, 0.0, False),
        (' {broken {"ok": true}', {"ok": True}, Scorer.JSON, 0.0, True),
        (' {"ok": 1}', {"ok": True}, Scorer.JSON, 0.0, False),
        (' {"a": {"b": [1, 2]}}', {"a": {"b": [1, 2]}}, Scorer.JSON, 0.0, True),
        (" no json here", {"a": 1}, Scorer.JSON, 0.0, False),
    ],
)
def test_scorers(answer: str, expected: Any, scorer: Scorer, tolerance: float, right: bool) -> None:
    assert score(answer, expected, scorer, tolerance) is right


def test_first_number_and_first_json_object() -> None:
    assert first_number("about .5 of it") == 0.5
    assert first_number("1e3 items") == 1000.0
    assert first_number("none") is None
    assert first_json_object('[1, 2] then {"a": 1}') == {"a": 1}
    assert first_json_object("{") is None
