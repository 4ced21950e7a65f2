"""Answer keys: each scorer's expected answer rendered as accepted text; prompts indexed."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from simulator.answer_key import (
    AnswerKeyError,
    AnswerKeyLine,
    index_lines,
    last_user_text,
    load_answer_keys,
    render_expected,
)


def line(**fields: Any) -> AnswerKeyLine:
    return AnswerKeyLine.model_validate({"prompt": "p", "category": "math", **fields})


@pytest.mark.parametrize(
    ("fields", "text"),
    [
        ({"expected": "Paris", "scorer": "exact"}, "Paris"),
        ({"expected": "Paris", "scorer": "contains"}, "Paris"),
        ({"expected": 42, "scorer": "numeric"}, "42"),
        ({"expected": 42.0, "scorer": "numeric"}, "42"),
        ({"expected": 2.5, "scorer": "numeric"}, "2.5"),
        ({"expected": " 7 ", "scorer": "numeric"}, "7"),
        ({"expected": {"a": [1, 2]}, "scorer": "json"}, '{"a": [1, 2]}'),
        ({"expected": "^def \\w+", "scorer": "regex", "answer": "def f(): pass"}, "def f(): pass"),
        ({"expected": "yes", "scorer": "regex"}, "yes"),
        ({"expected": 3}, "3"),
        # A code item with tests: its sample answer, which passes them, whatever its scorer.
        (
            {"expected": "Fizz", "scorer": "contains", "tests": "assert f(3)", "answer": "  x"},
            "  x",
        ),
        ({"expected": "^def", "scorer": "regex", "tests": "assert f(3)", "answer": "  x"}, "  x"),
    ],
)
def test_render_expected(fields: dict[str, Any], text: str) -> None:
    assert render_expected(line(**fields)) == text


def test_json_answer_parses_back() -> None:
    expected = {"name": "Ada", "year": 1815}
    assert json.loads(render_expected(line(expected=expected, scorer="json"))) == expected


def test_index_by_prompt_and_last_user_message() -> None:
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "first"},
        {"role": "assistant", "content": "ok"},
        {"role": "user", "content": [{"type": "text", "text": "  What is 2+2? "}]},
    ]
    index = index_lines(
        [
            line(prompt="  Capital of France?\n", expected="Paris", category="chat"),
            AnswerKeyLine.model_validate(
                {"messages": messages, "expected": 4, "category": "math", "scorer": "numeric"}
            ),
        ]
    )
    assert index["Capital of France?"].text == "Paris"
    assert index["What is 2+2?"].category == "math"
    assert last_user_text(messages) == "What is 2+2?"
    assert last_user_text([{"role": "system", "content": "x"}]) is None


@pytest.mark.parametrize(
    ("raw", "where"),
    [
        ('{"expected": 1, "category": "math"}', "(root)"),
        ('{"prompt": "p", "messages": [], "expected": 1, "category": "math"}', "(root)"),
        ('{"prompt": "p", "expected": 1, "category": "math", "scorer": "fuzzy"}', "scorer"),
        ('{"prompt": "p", "expected": 1}', "category"),
        ("{not json", "(root)"),
        ('{"prompt": "p", "expected": "x", "category": "code", "tests": "assert f()"}', "(root)"),
    ],
)
def test_bad_lines_name_file_line_and_field(tmp_path: Path, raw: str, where: str) -> None:
    path = tmp_path / "key.jsonl"
    path.write_text('{"prompt": "ok", "expected": 1, "category": "math"}\n\n' + raw + "\n")
    with pytest.raises(AnswerKeyError) as info:
        load_answer_keys([path])
    assert str(info.value).startswith(f"{path}:3: {where}:")


def test_later_files_win(tmp_path: Path) -> None:
    first, second = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    first.write_text('{"prompt": "q", "expected": "old", "category": "chat", "id": 1}\n')
    second.write_text('{"prompt": "q", "expected": "new", "category": "chat", "extra": true}\n')
    assert load_answer_keys([first, second])["q"].text == "new"
    with pytest.raises(AnswerKeyError, match="cannot read"):
        load_answer_keys([tmp_path / "missing.jsonl"])
