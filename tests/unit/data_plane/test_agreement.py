"""Answer comparison of shadow re-asks, by category."""

from __future__ import annotations

import json

import pytest

from data_plane.serving.agreement import answer_text, answers_agree


@pytest.mark.parametrize(
    ("category", "a", "b", "same"),
    [
        ("math", "The answer is 1,234.", "1234", True),
        ("math", "x = 3.50", "So x is 3.5", True),
        ("math", "42", "43", False),
        ("extraction", 'Here: {"name": "Bob", "age": 3}', '{"age": 3, "name": "Bob"}', True),
        ("extraction", '{"name": "Bob"}', '{"name": "Eve"}', False),
        ("chat", "Summer!", "  summer ", True),
        ("chat", "Summer", "Winter", False),
        ("code", "return  x + 1\n", "return x + 1", True),
        ("code", "return x + 1", "return x - 1", False),  # operators matter
        ("code", "return x*2", "return x * 2", False),  # text, not semantics
    ],
)
def test_answers_compare_by_category(category: str, a: str, b: str, same: bool) -> None:
    assert answers_agree(category, a, b) is same


def test_answer_text_reads_chat_and_completions_bodies() -> None:
    chat = {"choices": [{"message": {"role": "assistant", "content": "hi"}}]}
    completion = {"choices": [{"text": "there"}]}
    assert answer_text(json.dumps(chat).encode()) == "hi"
    assert answer_text(json.dumps(completion).encode()) == "there"
    assert answer_text(b"not json") is None
    assert answer_text(b'{"choices": []}') is None
