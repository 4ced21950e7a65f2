"""Answers and tokens: right with the configured probability, reproducible, OpenAI finishes."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from simulator.answer_key import WRONG_ANSWER, KnownAnswer
from simulator.completion import (
    FinishReason,
    count_tokens,
    decision_rng,
    filler_tokens,
    plan_completion,
    split_tokens,
)

KNOWN = KnownAnswer(category="math", text="The answer is 42")


@pytest.mark.parametrize(
    ("chars", "per_token", "tokens"),
    [(0, 4.0, 0), (1, 4.0, 1), (8, 4.0, 2), (9, 4.0, 3), (9, 3.0, 3)],
)
def test_count_tokens(chars: int, per_token: float, tokens: int) -> None:
    assert count_tokens(chars, per_token) == tokens


@given(st.text(max_size=200), st.floats(min_value=0.5, max_value=20))
def test_split_tokens_joins_back(text: str, per_token: float) -> None:
    tokens = split_tokens(text, per_token)
    assert "".join(tokens) == text
    assert all(tokens)


def test_unknown_prompt_fills_to_max_tokens() -> None:
    plan = plan_completion(None, 1.0, 0.0, 7, False, 4.0)
    assert len(plan.tokens) == 7
    assert plan.finish_reason is FinishReason.LENGTH
    assert plan.correct is None
    assert plan.tokens == filler_tokens(7)


def test_right_and_wrong_answers_follow_the_draw() -> None:
    right = plan_completion(KNOWN, 0.7, 0.69, 100, False, 4.0)
    wrong = plan_completion(KNOWN, 0.7, 0.70, 100, False, 4.0)
    assert (right.text, right.correct, right.finish_reason) == (KNOWN.text, True, "stop")
    assert (wrong.text, wrong.correct, wrong.finish_reason) == (WRONG_ANSWER, False, "stop")
    assert right.category == "math"


def test_long_answers_are_cut_at_max_tokens() -> None:
    plan = plan_completion(KNOWN, 1.0, 0.0, 2, False, 4.0)
    assert plan.text == "The answ"
    assert plan.finish_reason is FinishReason.LENGTH


@pytest.mark.parametrize("max_tokens", [1, 3, 4, 30])
def test_ignore_eos_gives_exactly_max_tokens(max_tokens: int) -> None:
    plan = plan_completion(KNOWN, 1.0, 0.0, max_tokens, True, 4.0)
    assert len(plan.tokens) == max_tokens
    assert plan.finish_reason is FinishReason.LENGTH
    assert (KNOWN.text + "".join(filler_tokens(30))).startswith(plan.text)


def test_decision_rng_is_reproducible_and_depends_on_every_input() -> None:
    base = decision_rng(1, "m", "p", 0).random()
    assert decision_rng(1, "m", "p", 0).random() == base
    others = {
        decision_rng(2, "m", "p", 0).random(),
        decision_rng(1, "n", "p", 0).random(),
        decision_rng(1, "m", "q", 0).random(),
        decision_rng(1, "m", "p", 1).random(),
    }
    assert base not in others
    assert len(others) == 4
