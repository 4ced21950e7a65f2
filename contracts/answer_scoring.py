"""Scorers: does a model's answer match the expected one? exact | contains | regex | numeric | json.

Shared by the profiler (eval items) and the data plane (accuracy checks, `agreement.py`).

PURE: stdlib only. Answers are completion-style continuations ("The capital of France is" ->
" Paris. It is..."), so each scorer looks for the answer at the start of, or inside, the text.
"""

from __future__ import annotations

import json
import math
import re
from enum import StrEnum
from typing import Any

_NUMBER = re.compile(r"[-+]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:[eE][-+]?\d+)?|[-+]?\.\d+")


class Scorer(StrEnum):
    EXACT = "exact"  # first non-empty line, trimmed (and a trailing '.' dropped) == expected
    CONTAINS = "contains"  # expected occurs in the answer, case-insensitively
    REGEX = "regex"  # re.search(expected, answer)
    NUMERIC = "numeric"  # the first number in the answer is within `tolerance` of expected
    JSON = "json"  # the first JSON object in the answer has every expected key and value


def first_line(answer: str) -> str:
    """The first non-empty line, trimmed, without one trailing period."""
    for line in answer.splitlines():
        stripped = line.strip()
        if stripped:
            return stripped.removesuffix(".").rstrip()
    return ""


def first_number(answer: str) -> float | None:
    """The first decimal number in `answer` (thousands separators allowed), or None."""
    match = _NUMBER.search(answer)
    if match is None:
        return None
    return float(match.group().replace(",", ""))


def numbers(answer: str) -> list[float]:
    """Every decimal number in `answer`, in order (as `first_number` reads them)."""
    return [float(m.group().replace(",", "")) for m in _NUMBER.finditer(answer)]


def first_json_object(answer: str) -> dict[str, Any] | None:
    """The first JSON object that parses, starting at any '{' in the answer; None if none."""
    decoder = json.JSONDecoder()
    for start in (i for i, ch in enumerate(answer) if ch == "{"):
        try:
            value, _ = decoder.raw_decode(answer, start)
        except json.JSONDecodeError:
            continue
        if isinstance(value, dict):
            return value
    return None


def _json_matches(found: Any, expected: Any) -> bool:
    """Every key of `expected` is in `found` with an equal value (recursively for objects;
    numbers compare by value, so 30 == 30.0)."""
    if isinstance(expected, dict):
        return isinstance(found, dict) and all(
            k in found and _json_matches(found[k], v) for k, v in expected.items()
        )
    if isinstance(expected, bool) or isinstance(found, bool):
        return found is expected
    if isinstance(expected, int | float) and isinstance(found, int | float):
        return math.isclose(found, expected, rel_tol=0.0, abs_tol=1e-9)
    return bool(found == expected)


def score(answer: str, expected: Any, scorer: Scorer, tolerance: float = 0.0) -> bool:
    """True when `answer` is right. `expected` has the shape the scorer needs (validated when
    the eval set is parsed): str for exact/contains/regex, a number for numeric, an object for
    json. `tolerance` is absolute and applies to numeric only."""
    match scorer:
        case Scorer.EXACT:
            return first_line(answer) == str(expected).strip()
        case Scorer.CONTAINS:
            return str(expected).casefold() in answer.casefold()
        case Scorer.REGEX:
            return re.search(str(expected), answer) is not None
        case Scorer.NUMERIC:
            value = first_number(answer)
            return value is not None and abs(value - float(expected)) <= tolerance + 1e-9
        case Scorer.JSON:
            found = first_json_object(answer)
            return found is not None and _json_matches(found, expected)
