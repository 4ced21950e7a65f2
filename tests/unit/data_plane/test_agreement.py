"""Answer comparison of accuracy checks: only where the category's scorer decides, and the
re-ask a check sends (docs/accuracy.md "Live checks")."""

from __future__ import annotations

import json

import orjson
import pytest

from data_plane.checks.agreement import answer_text, checked, verdict
from data_plane.checks.reask import reask


@pytest.mark.parametrize(
    ("category", "answer", "reference", "found"),
    [
        ("math", "The answer is 1,234.", "1234", True),
        ("math", "12 + 7 = 19", "19", True),  # a worked line: its last number is the result
        ("math", "x = 3.50", "3.5", True),
        ("math", "42", "43", False),
        ("math", "I cannot tell.", "43", False),  # no number where one was expected
        ("math", "42", "between 40 and 45", None),  # no one answer to expect
        # the final answer, not the last number: 95376ca read 7 here and disagreed
        ("math", "The answer is 42. (Check: 6*7)", "42", True),
        ("math", "42", "The answer is 42. (Check: 6*7)", True),  # undecided on 95376ca
        ("math", " 19\n12 + 8 = 20", "12 + 7 = 19", True),
        ("math", "The answer is 41. (Check: 6*7)", "#### 42", False),
        ("math", "42", "no idea", None),
        ("extraction", 'Here: {"name": "Bob", "age": 3}', '{"age": 3, "name": "Bob"}', True),
        ("extraction", '{"name": "Bob"}', '{"name": "Eve"}', False),
        ("extraction", '{"name": "Bob", "age": 3}', '{"name": "Bob"}', False),  # both ways
        ("extraction", "Bob", '{"name": "Bob"}', False),
        ("extraction", '{"name": "Bob"}', "Bob is his name", None),
        # free text: two right answers may share no words, so no verdict at all
        ("chat", "Summer!", "  summer ", None),
        ("chat", "It is the warmest season.", "Summer", None),
        ("reasoning", "Alice", "The tallest is Alice.", None),
        ("code", "return x + 1", "return x - 1", None),
    ],
)
def test_only_a_deciding_scorer_gives_a_verdict(
    category: str, answer: str, reference: str, found: bool | None
) -> None:
    assert verdict(category, answer, reference) is found
    assert checked(category) is (category in ("math", "extraction"))


def test_answer_text_reads_chat_and_completions_bodies() -> None:
    chat = {"choices": [{"message": {"role": "assistant", "content": "hi"}}]}
    completion = {"choices": [{"text": "there"}]}
    assert answer_text(json.dumps(chat).encode()) == "hi"
    assert answer_text(json.dumps(completion).encode()) == "there"
    assert answer_text(b"not json") is None
    assert answer_text(b'{"choices": []}') is None


def test_a_reask_is_greedy_single_and_capped_whatever_the_client_asked() -> None:
    client = {
        "model": "m",
        "messages": [{"role": "user", "content": "2+2?"}],
        "temperature": 1.8,
        "n": 8,
        "max_tokens": 32_000,
        "stream": True,
        "logprobs": True,
    }
    ask = reask(orjson.dumps(client), cap=256)
    assert ask is not None
    assert not ask.reusable
    sent = orjson.loads(ask.for_model("ref-model"))
    assert sent == {
        "model": "ref-model",
        "messages": client["messages"],
        "temperature": 0.0,
        "n": 1,
        "stream": False,
        "max_tokens": 256,
    }


@pytest.mark.parametrize(
    ("fields", "reusable", "max_tokens"),
    [
        ({"temperature": 0, "max_tokens": 64}, True, 64),  # already a check's request
        ({"temperature": 0, "max_completion_tokens": 64}, True, 64),
        ({"temperature": 0}, False, 256),  # no limit: the served answer may be longer
        ({"temperature": 0, "max_tokens": 1000}, False, 256),
        ({"temperature": 0.7, "max_tokens": 64}, False, 64),
        ({"temperature": False, "max_tokens": 64}, False, 64),  # not a number
        ({"temperature": 0, "max_tokens": 64, "n": 2}, False, 64),
    ],
)
def test_the_served_answer_stands_only_for_an_identical_request(
    fields: dict[str, object], reusable: bool, max_tokens: int
) -> None:
    ask = reask(orjson.dumps({"model": "m", "prompt": "2+2=", **fields}), cap=256)
    assert ask is not None
    assert (ask.reusable, ask.max_tokens) == (reusable, max_tokens)


def test_a_body_that_is_not_an_object_is_not_reasked() -> None:
    assert reask(b"[1, 2]", cap=256) is None
    assert reask(b"{", cap=256) is None
