"""scoring: every scorer against completion-style answers."""

from __future__ import annotations

from typing import Any

import pytest

from contracts.answer_scoring import (
    FinalAnswer,
    Scorer,
    final_answer,
    first_json_object,
    first_number,
    score,
)


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


@pytest.mark.parametrize(
    ("answer", "found"),
    [
        # 1. an explicit marker wins, the last of the strongest kind
        ("The answer is 42. (Check: 6*7)", FinalAnswer(42, True)),  # 95376ca's checks: 7
        ("The answer is 42. Check: 6*7.", FinalAnswer(42, True)),
        ("x = 5, so 2x = 10. The answer is 10", FinalAnswer(10, True)),
        ("Answer: 1,234", FinalAnswer(1234, True)),
        ("**Answer:** $42.", FinalAnswer(42, True)),
        ("The final answer is 7, not 8.", FinalAnswer(7, True)),
        ("6 * 7 = 42, so 40 + 2. #### 42", FinalAnswer(42, True)),
        (r"We get 6 \cdot 7 = 42, hence \boxed{42}. (Check: 42 / 7 = 6)", FinalAnswer(42, True)),
        (r"answer is 41, or rather \boxed{42}", FinalAnswer(42, True)),  # boxed is stronger
        # 2. a first line that is only a number: a completion's continuation, a bare answer
        (" 19\n12 + 8 = 20", FinalAnswer(19, True)),  # the profiler's eval items
        ("42", FinalAnswer(42, True)),
        ("42.\n\nBecause 6 * 7 = 42 and 6 + 7 = 13.", FinalAnswer(42, True)),
        # 3. the number after the last `=`
        ("12 + 7 = 19", FinalAnswer(19, True)),
        ("6 * 7 = 42 (Check: 42 / 7 = 6)", FinalAnswer(42, True)),
        ("Step 1: 6*7 = 42\nStep 2: 42 + 1 = 43\nSo it is 43.", FinalAnswer(43, True)),
        # 4. the last number, outside a trailing check; stated only when it is the only one
        ("We multiply 6 by 7 and get 42.\nCheck: 42 / 7 = 6.", FinalAnswer(42, False)),
        ("It is about 3.004 apples", FinalAnswer(3.004, True)),
        ("between 40 and 45", FinalAnswer(45, False)),
        ("(42)", FinalAnswer(42, True)),  # nothing outside the parentheses: the whole text
        ("I cannot tell.", None),
    ],
)
def test_final_answer_reads_the_stated_rule(answer: str, found: FinalAnswer | None) -> None:
    assert final_answer(answer) == found


def test_the_numeric_scorer_takes_the_final_answer() -> None:
    """The profiler's scorer and the live checks read one number by one rule: on 95376ca the
    profiler took the first number and the checks the last."""
    assert score("The answer is 42. (Check: 6*7)", 42, Scorer.NUMERIC)
    assert score("6 * 7 = 42", 42, Scorer.NUMERIC)  # the first number (6) on 95376ca
    assert not score("The answer is 41. (Check: 6*7 = 42)", 42, Scorer.NUMERIC)
