"""Degenerate-answer checks for the quality guard (PURE).

A non-streaming answer from a lower-precision pair is re-asked on a more precise pair when it
is empty, ends in runaway repetition, or is not JSON although `response_format` asked for JSON.
The checks read the first choice only and never log or keep the text.
"""

from __future__ import annotations

import json
import zlib
from enum import StrEnum
from typing import Any

import orjson

REPETITION_WINDOW_CHARS = 1024
REPETITION_MIN_CHARS = 256
# Natural text compresses to ~0.3-0.5 of its size; a loop of a few words to well under 0.1.
REPETITION_MAX_RATIO = 0.1


class Degeneracy(StrEnum):
    EMPTY = "empty"
    REPETITION = "repetition"
    INVALID_JSON = "invalid_json"


def _first_choice(doc: Any) -> dict[str, Any] | None:
    if not isinstance(doc, dict):
        return None
    choices = doc.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        return None
    return choices[0]


def _answer_text(choice: dict[str, Any]) -> tuple[str, bool]:
    """(text, has_tool_calls) of a chat or completions choice."""
    message = choice.get("message")
    if isinstance(message, dict):
        content = message.get("content")
        tools = message.get("tool_calls")
        return (content if isinstance(content, str) else ""), bool(tools)
    text = choice.get("text")
    return (text if isinstance(text, str) else ""), False


def is_runaway_repetition(text: str) -> bool:
    """True when the answer's tail is a loop (its last KiB compresses below 10%)."""
    tail = text[-REPETITION_WINDOW_CHARS:]
    if len(tail) < REPETITION_MIN_CHARS:
        return False
    raw = tail.encode("utf-8")
    return len(zlib.compress(raw, 6)) < REPETITION_MAX_RATIO * len(raw)


def check_answer(body: bytes, wants_json: bool, doc: Any = None) -> Degeneracy | None:
    """What is wrong with a 200 answer body, or None when it looks fine; `doc`: the body as
    already decoded (`usage.read_usage`), None to decode it here.

    A body that is not an OpenAI completion object at all is left alone: the guard judges
    answers, not protocol errors.
    """
    if doc is None:
        try:
            doc = orjson.loads(body)
        except orjson.JSONDecodeError:  # not JSON (or not UTF-8): not judged
            return None
    choice = _first_choice(doc)
    if choice is None:
        return None
    text, has_tools = _answer_text(choice)
    if not text.strip():
        return None if has_tools else Degeneracy.EMPTY
    if is_runaway_repetition(text):
        return Degeneracy.REPETITION
    if wants_json:
        try:
            json.loads(text)
        except ValueError:
            return Degeneracy.INVALID_JSON
    return None
