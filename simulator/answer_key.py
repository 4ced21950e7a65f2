"""Answer keys: the profiler's eval-set JSONL, indexed by prompt text for the simulator.

A simulated pair answers a known prompt with the expected answer (rendered as the text a grader
accepts) with the configured probability per category. A line with `tests` (a code item, scored
by running them: `contracts.code_tests`) must carry a sample `answer` that passes them: that
is its right answer, whatever its text scorer, so scoring by tests measures the configured
accuracy. Loading reads files; the rest is pure.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from simulator.config import format_loc

Scorer = Literal["exact", "contains", "regex", "numeric", "json"]
WRONG_ANSWER = "I am not sure."


class AnswerKeyLine(BaseModel):
    """One eval-set line; unknown fields are ignored (the profiler may add its own)."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    prompt: str | None = None
    messages: list[dict[str, Any]] | None = None
    expected: Any
    category: str = Field(min_length=1)
    scorer: Scorer = "exact"
    answer: str | None = None
    id: str | int | None = None
    tests: str | None = None

    @model_validator(mode="after")
    def _one_input(self) -> AnswerKeyLine:
        if (self.prompt is None) == (self.messages is None):
            raise ValueError("exactly one of `prompt` or `messages` is required")
        if self.messages is not None and last_user_text(self.messages) is None:
            raise ValueError("`messages` needs a user message with text content")
        if self.tests is not None and self.answer is None:
            raise ValueError(
                "a line with `tests` needs its `answer`: the right answer must pass them"
            )
        return self


@dataclass(frozen=True, slots=True)
class KnownAnswer:
    """What a simulated engine says when it knows the answer, and the category it counts in."""

    category: str
    text: str


class AnswerKeyError(ValueError):
    """An answer-key file that cannot be used; names the file and line."""


def content_text(content: Any) -> str:
    """Text of a message `content`: a string, or the text parts of a content-part list."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = [p.get("text") for p in content if isinstance(p, dict)]
        return "".join(p for p in parts if isinstance(p, str))
    return ""


def last_user_text(messages: Sequence[Mapping[str, Any]]) -> str | None:
    """The last user message's text, whitespace-stripped (the key a chat prompt is found by)."""
    for message in reversed(messages):
        if message.get("role") == "user":
            return content_text(message.get("content")).strip()
    return None


def _render_number(value: Any) -> str:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return str(value).strip()
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        return str(int(value))
    return repr(value)


def render_expected(line: AnswerKeyLine) -> str:
    """The answer text a grader with `line.scorer` accepts for `line.expected`; for a line
    with `tests`, its sample `answer` (code that passes them)."""
    expected = line.expected
    if line.tests is not None and line.answer is not None:
        return line.answer
    if line.scorer == "regex":
        return line.answer if line.answer is not None else str(expected)
    if line.scorer == "numeric":
        return _render_number(expected)
    if line.scorer == "json" or not isinstance(expected, str):
        return json.dumps(expected)
    return expected


def index_lines(lines: Iterable[AnswerKeyLine]) -> dict[str, KnownAnswer]:
    """Prompt text (stripped) -> known answer; a later line for the same prompt wins."""
    index: dict[str, KnownAnswer] = {}
    for line in lines:
        if line.prompt is not None:
            key = line.prompt.strip()
        else:
            key = last_user_text(line.messages or []) or ""
        index[key] = KnownAnswer(category=line.category, text=render_expected(line))
    return index


def parse_lines(text: str, source: str) -> list[AnswerKeyLine]:
    """Validate JSONL text; errors say `file:line: field.path: message`."""
    lines: list[AnswerKeyLine] = []
    for number, raw in enumerate(text.splitlines(), start=1):
        if not raw.strip():
            continue
        try:
            lines.append(AnswerKeyLine.model_validate_json(raw))
        except ValidationError as err:
            problem = err.errors()[0]
            where = format_loc(tuple(problem["loc"]))
            raise AnswerKeyError(f"{source}:{number}: {where}: {problem['msg']}") from err
    return lines


def load_answer_keys(paths: Iterable[Path]) -> dict[str, KnownAnswer]:
    """Read and index every JSONL file; later files win on repeated prompts."""
    lines: list[AnswerKeyLine] = []
    for path in paths:
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as err:
            raise AnswerKeyError(f"{path}: cannot read: {err.strerror}") from err
        lines += parse_lines(text, str(path))
    return index_lines(lines)
